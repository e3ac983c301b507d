// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// developerPages are pages under docs/ written for people changing the
// code, not running it: they may name tests and history.
var developerPages = map[string]string{
	"docs/architecture.md": "the package map, for contributors",
	"docs/building.md":     "builds, pins and test times, for contributors",
	"docs/threat-model.md": "for reviewers: each bound with the test that proves it (its test column is the point of the page)",
}

// userPages are the pages an operator reads: the top-level README, docs/
// but the developer pages, and the READMEs of the components, the CLI and
// the deployment recipes.
func userPages(t *testing.T) []string {
	t.Helper()
	root := testenv.RepoRoot()
	pages := []string{"README.md"}
	for _, glob := range []string{"docs/*.md", "extension/*/README.md", "receiver/*/README.md",
		"processor/*/README.md", "connector/*/README.md", "cmd/*/README.md", "deploy/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			if _, dev := developerPages[rel]; !dev {
				pages = append(pages, rel)
			}
		}
	}
	if len(pages) < 15 {
		t.Fatalf("only %d user pages: %v", len(pages), pages)
	}
	return pages
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	fence      = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	// Go test, benchmark and fuzz functions.
	testFunc = regexp.MustCompile(`\b(Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*`)
	// An issue or pull request number of any tracker (OTEP links are
	// named by their OTEP number, not by this pattern).
	issueRef = regexp.MustCompile(`(?i)\bissues?\s+#?\d+\b|/issues/\d+|(^|[\s(])#\d+\b`)
	// A commit hash in prose: 7 to 12 hex digits with a letter and a
	// digit, not part of an identifier, UUID or longer hex string.
	hexWord = regexp.MustCompile(`(^|[^0-9A-Za-z_\-…/.])([0-9a-f]{7,12})($|[^0-9A-Za-z_\-…])`)
)

// prose is a page without its code blocks and code spans: hex and names
// in example output are not references.
func prose(text string) string {
	return inlineCode.ReplaceAllString(fence.ReplaceAllString(text, ""), "``")
}

// commitHashes are the hex words of text that look like commit hashes.
func commitHashes(text string) []string {
	var out []string
	for _, m := range hexWord.FindAllStringSubmatch(text, -1) {
		h := m[2]
		if strings.ContainsAny(h, "abcdef") && strings.ContainsAny(h, "0123456789") {
			out = append(out, h)
		}
	}
	return out
}

// TestUserPagesNameNoTestsIssuesOrCommits: user pages say what otelctx
// does, not how it was tested or when it changed: no test function (in
// prose or code), no issue number, no commit hash (in prose). History is in
// CHANGELOG.md and the commit log; tests in the developer pages.
func TestUserPagesNameNoTestsIssuesOrCommits(t *testing.T) {
	for _, page := range userPages(t) {
		text := read(t, page)
		for _, m := range slices.Compact(testFunc.FindAllString(text, -1)) {
			t.Errorf("%s names the test %s", page, m)
		}
		p := prose(text)
		for _, m := range issueRef.FindAllString(p, -1) {
			t.Errorf("%s names an issue: %q", page, strings.TrimSpace(m))
		}
		for _, h := range commitHashes(p) {
			t.Errorf("%s names a commit: %s", page, h)
		}
	}
}

// TestHygieneCheckCatches: the patterns above find what they look for and
// leave example output alone.
func TestHygieneCheckCatches(t *testing.T) {
	for _, s := range []string{"see TestReloadOnSIGHUP", "`FuzzDecode`", "BenchmarkHostile/pids=64"} {
		if !testFunc.MatchString(s) {
			t.Errorf("test name not caught: %s", s)
		}
	}
	for _, s := range []string{"containerd issue 2679", "(#123)", "github.com/x/y/issues/12"} {
		if !issueRef.MatchString(prose(s)) {
			t.Errorf("issue not caught: %s", s)
		}
	}
	for _, s := range []string{"measured at f5ea272", "(89911bb)", "before 8589344a1"} {
		if len(commitHashes(prose(s))) == 0 {
			t.Errorf("commit not caught: %s", s)
		}
	}
	for _, s := range []string{"`7f1e2b9c`", "uuid 627cc493-f310-47de-96bd-71410b7dec09", "```\nspan 3f4e1b2c\n```",
		"OTEP 4719", "[OTEP 4719]: https://github.com/open-telemetry/opentelemetry-specification/pull/4719", "build 1234567"} {
		p := prose(s)
		if issueRef.MatchString(p) || len(commitHashes(p)) > 0 || testFunc.MatchString(p) {
			t.Errorf("false positive: %s", s)
		}
	}
}

// TestPagesShowVERSION: every image tag a page shows is VERSION's, and
// CHANGELOG.md has a section for VERSION.
func TestPagesShowVERSION(t *testing.T) {
	version := strings.TrimSpace(read(t, "VERSION"))
	// Main between releases is the next version with -dev (CHANGELOG.md).
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(-dev)?$`).MatchString(version) {
		t.Fatalf("VERSION %q is not MAJOR.MINOR.PATCH or MAJOR.MINOR.PATCH-dev", version)
	}
	if !strings.Contains(read(t, "CHANGELOG.md"), "\n## ["+version+"]") {
		t.Errorf("CHANGELOG.md has no section ## [%s]", version)
	}
	tag := regexp.MustCompile(`otelctx:(\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?)`)
	pages := append(userPages(t), "docs/building.md", "BENCHMARKS.md")
	for _, page := range pages {
		for _, m := range tag.FindAllStringSubmatch(read(t, page), -1) {
			if m[1] != version {
				t.Errorf("%s shows the image tag %s, VERSION is %s", page, m[0], version)
			}
		}
	}
}

// shippedPorts are the ports the shipped configurations listen on, with
// what listens (gRPC, HTTP, or the component's name).
func shippedPorts(t *testing.T) map[string]string {
	t.Helper()
	ports := map[string]string{}
	endpoint := regexp.MustCompile(`:(\d{2,5})$`)
	var walk func(path []string, v any)
	walk = func(path []string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				walk(append(slices.Clone(path), k), c)
			}
		case []any:
			for _, c := range v {
				walk(path, c)
			}
		case string:
			last := path[len(path)-1]
			if m := endpoint.FindStringSubmatch(v); m != nil && last == "endpoint" && path[0] != "exporters" {
				what := path[1]
				if len(path) >= 4 && path[2] == "protocols" {
					what = map[string]string{"grpc": "gRPC", "http": "HTTP"}[path[3]]
				}
				ports[m[1]] = what
			}
		case float64:
			if path[len(path)-1] == "port" {
				ports[strconv.FormatFloat(v, 'f', -1, 64)] = "metrics"
			}
		}
	}
	configs, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "*.yaml"))
	if len(configs) < 2 {
		t.Fatalf("config/: %d configurations", len(configs))
	}
	for _, c := range configs {
		var cfg map[string]any
		b, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &cfg); err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		walk(nil, cfg)
	}
	ports["8888"] = "metrics" // the collector's default telemetry port
	return ports
}

// otherPorts are ports pages may name that no shipped configuration opens.
var otherPorts = map[string]string{
	"11000": "devfiler's, the port the OTel eBPF profiler's README uses in its example",
}

var (
	portRef  = regexp.MustCompile("(?:127\\.0\\.0\\.1|localhost|0\\.0\\.0\\.0|\\}|\\.example|\\.local|\\.svc|^|[\\s(`]):(\\d{4,5})\\b")
	protoRef = regexp.MustCompile(`:(\d{4,5})\b` + "`?" + `\)?,?\s*\(?(?:OTLP/|OTLP over )?(gRPC|HTTP)\b`)
	// make demo-profiles and the loopback port it sends to, in one sentence.
	demoRef = regexp.MustCompile(`demo-profiles[^.]{0,200}?LOOPBACK:(\d{4,5})|LOOPBACK:(\d{4,5})[^.;]{0,80}?demo-profiles`)
	demoDef = regexp.MustCompile(`flag\.String\("endpoint", "127\.0\.0\.1:(\d+)"`)
)

// TestPagesNamePortsThatListen: a port a page names is one a shipped
// configuration listens on (or one listed in otherPorts), named with the
// protocol that listens there; make demo-profiles is said to send where it
// sends.
func TestPagesNamePortsThatListen(t *testing.T) {
	ports := shippedPorts(t)
	for _, want := range []string{"4317", "4318", "13133", "8888"} {
		if ports[want] == "" {
			t.Fatalf("the shipped configurations do not open %s: %v", want, ports)
		}
	}
	dm := demoDef.FindStringSubmatch(read(t, "test/enrich/demoprofiles/main.go"))
	if dm == nil {
		t.Fatal("test/enrich/demoprofiles: no default endpoint found")
	}
	for _, page := range userPages(t) {
		text := read(t, page)
		for _, m := range portRef.FindAllStringSubmatch(text, -1) {
			if ports[m[1]] == "" && otherPorts[m[1]] == "" {
				t.Errorf("%s names port %s (%q), which no shipped configuration opens", page, m[1], m[0])
			}
		}
		flat := strings.Join(strings.Fields(text), " ")
		for _, m := range protoRef.FindAllStringSubmatch(flat, -1) {
			if got := ports[m[1]]; (got == "gRPC" || got == "HTTP") && got != m[2] {
				t.Errorf("%s calls port %s %s; the shipped configurations serve %s there", page, m[1], m[2], got)
			}
		}
		for _, m := range demoRef.FindAllStringSubmatch(strings.ReplaceAll(flat, "127.0.0.1", "LOOPBACK"), -1) {
			if port := m[1] + m[2]; port != dm[1] {
				t.Errorf("%s: make demo-profiles sends to 127.0.0.1:%s, not %s", page, dm[1], port)
			}
		}
	}
}

// TestPortCheckCatches: the port patterns catch a wrong port, a wrong
// protocol and a wrong demo port.
func TestPortCheckCatches(t *testing.T) {
	if m := protoRef.FindStringSubmatch("listens on `127.0.0.1:4318` (gRPC)"); m == nil || m[2] != "gRPC" {
		t.Errorf("protocol not read: %v", m)
	}
	for _, s := range []string{"`make demo-profiles` in another terminal to 127.0.0.1:4317 (OTLP/gRPC)",
		"Profiles sent to 127.0.0.1:4317 by a profiler, or by `make demo-profiles` in another terminal, print"} {
		if m := demoRef.FindStringSubmatch(strings.ReplaceAll(s, "127.0.0.1", "LOOPBACK")); m == nil || m[1]+m[2] != "4317" {
			t.Errorf("demo port not read in %q: %v", s, m)
		}
	}
	if m := portRef.FindStringSubmatch("on localhost:9999"); m == nil || m[1] != "9999" {
		t.Errorf("port not read: %v", m)
	}
	for _, s := range []string{"pid:2570", "nofile=1024:1024", "09:55:15.81Z"} {
		if m := portRef.FindStringSubmatch(s); m != nil {
			t.Errorf("%q read as a port: %v", s, m)
		}
	}
}

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)
	notSlug = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// anchors are the heading anchors GitHub gives a Markdown page.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		slug := strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")
		out[slug] = true
	}
	return out
}

// TestLinksResolve: every relative link of the user pages, docs/ and
// BENCHMARKS.md names a file of the repository, and a #fragment names a
// heading of that page (sections move between pages).
func TestLinksResolve(t *testing.T) {
	root := testenv.RepoRoot()
	pages := append(userPages(t), "BENCHMARKS.md", "docs/architecture.md", "docs/building.md", "docs/threat-model.md",
		"test/vm/README.md")
	for _, page := range pages {
		text := read(t, page)
		for _, m := range mdLink.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(link, "#")
			target := page
			if file != "" {
				target = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(filepath.Join(root, target)); err != nil {
					t.Errorf("%s: link %s: no such file", page, link)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(target, ".md") && !anchors(read(t, target))[frag] {
				t.Errorf("%s: link %s: %s has no heading #%s", page, link, target, frag)
			}
		}
	}
}

// TestAnchorsAsGitHub: headings with code, parentheses and slashes give
// GitHub's anchors.
func TestAnchorsAsGitHub(t *testing.T) {
	a := anchors("# Thread context (eBPF sampler)\n## `processctx` extension\n### DD_OTEL_CTX (Datadog Java profiler)\n## Kernels in VMs\n")
	for _, want := range []string{"thread-context-ebpf-sampler", "processctx-extension", "dd_otel_ctx-datadog-java-profiler", "kernels-in-vms"} {
		if !a[want] {
			t.Errorf("no anchor %s in %v", want, a)
		}
	}
}

// figureHomes are measured figures that more than one page used to quote,
// and disagree on: each is stated on its home page (and in BENCHMARKS.md's
// operator summary, which names its section); other pages link there.
var figureHomes = []struct {
	figure *regexp.Regexp
	home   string
}{
	{regexp.MustCompile(`66\s*[–-]\s*72 MiB`), "BENCHMARKS.md"}, // the soak's RSS after warm-up
	{regexp.MustCompile(`62\s*[–-]\s*73 MiB`), "BENCHMARKS.md"}, // a misquote of it
	{regexp.MustCompile(`\b87 MiB`), "docs/deploy.md"},          // RSS of today's binary at start
	{regexp.MustCompile(`\b45 MiB`), "docs/deploy.md"},          // RSS, own ticks, 36 MiB binary
	{regexp.MustCompile(`1\.5\s*[–-]\s*2 minutes`), "docs/building.md"},
}

// TestFiguresHaveOneHome: no page (nor the DaemonSet's comments) but a
// figure's home (and the operator summary) quotes it.
func TestFiguresHaveOneHome(t *testing.T) {
	pages := append(userPages(t), "BENCHMARKS.md", "deploy/kubernetes/40-daemonset.yaml")
	for p := range developerPages {
		pages = append(pages, p)
	}
	for _, page := range pages {
		text := read(t, page)
		if page == "BENCHMARKS.md" {
			// The operator summary quotes with a link to each figure's section.
			if i := strings.Index(text, "\n## How these are measured"); i >= 0 {
				text = text[i:]
			}
		}
		for _, f := range figureHomes {
			if page != f.home && f.figure.MatchString(text) {
				t.Errorf("%s quotes %q, whose home is %s: link there instead", page, f.figure.FindString(text), f.home)
			}
		}
	}
}

// runbookPrefix is where the alerting rules' runbooks are: sections of
// docs/troubleshooting.md on the repository's main branch.
const runbookPrefix = "https://github.com/otelctx/otelctx/blob/main/docs/troubleshooting.md#"

// TestAlertRunbooks: every alert of deploy/prometheus/otelctx-alerts.yaml
// has a runbook_url, a section of docs/troubleshooting.md that exists and
// names the alert.
func TestAlertRunbooks(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "deploy/prometheus/otelctx-alerts.yaml")), &rules); err != nil {
		t.Fatal(err)
	}
	page := read(t, "docs/troubleshooting.md")
	have := anchors(page)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			u := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(u, runbookPrefix)
			switch {
			case !ok:
				t.Errorf("%s: runbook_url %q is not a section of %s", r.Alert, u, runbookPrefix)
			case !have[anchor]:
				t.Errorf("%s: docs/troubleshooting.md has no heading #%s", r.Alert, anchor)
			}
		}
	}
	if n < 10 {
		t.Errorf("%d alerts, want the dozen of the rule file", n)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if !strings.Contains(page, "`"+r.Alert+"`") && !strings.Contains(read(t, "docs/operating.md"), "`"+r.Alert+"`") {
				t.Errorf("%s is named neither in docs/troubleshooting.md nor in docs/operating.md", r.Alert)
			}
		}
	}
}

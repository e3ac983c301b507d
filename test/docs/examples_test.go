// SPDX-License-Identifier: Apache-2.0

//go:build linux

package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// example is one ```yaml block of a page.
type example struct {
	page string
	line int // of the opening fence
	text string
}

var yamlFence = regexp.MustCompile("^\\s*```ya?ml\\s*$")

// yamlExamples are the ```yaml blocks of a page, unindented (a block in a
// list item is indented with it).
func yamlExamples(page, text string) []example {
	var out []example
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if !yamlFence.MatchString(lines[i]) {
			continue
		}
		indent := lines[i][:len(lines[i])-len(strings.TrimLeft(lines[i], " "))]
		var body []string
		j := i + 1
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			body = append(body, strings.TrimPrefix(lines[j], indent))
		}
		out = append(out, example{page: page, line: i + 1, text: strings.Join(body, "\n") + "\n"})
		i = j
	}
	return out
}

// collectorSections are the top-level keys of a collector configuration.
var collectorSections = map[string]bool{
	"extensions": true, "receivers": true, "processors": true, "exporters": true,
	"connectors": true, "service": true,
}

// overConfig is the marker of a fragment: its first line, a comment, names
// the shipped configuration it is merged over (`# ... over
// config/otelctx-production.yaml` or `# excerpt of config/...`).
var overConfig = regexp.MustCompile(`^#.*\b(config/[a-z0-9-]+\.yaml)`)

// kind says how an example is checked: "data" (not a collector
// configuration: it must parse), "complete" (validated alone), "over"
// (validated merged over base) and "refused" (its first line says so:
// refused merged over base, or alone).
func (e example) kind(t *testing.T) (kind, base string) {
	var top map[string]any
	if err := yaml.Unmarshal([]byte(e.text), &top); err != nil {
		t.Errorf("%s:%d: the YAML example does not parse: %v\n%s", e.page, e.line, err, e.text)
		return "", ""
	}
	first, _, _ := strings.Cut(e.text, "\n")
	if m := overConfig.FindStringSubmatch(first); m != nil {
		base = m[1]
	}
	config := 0
	for k := range top {
		if collectorSections[k] {
			config++
		}
	}
	switch {
	case config == 0:
		return "data", ""
	case config != len(top):
		t.Errorf("%s:%d: a YAML example mixes collector sections with other keys: %v", e.page, e.line, keys(top))
		return "", ""
	case strings.HasPrefix(first, "#") && strings.Contains(first, "refused"):
		return "refused", base
	case base != "":
		return "over", base
	default:
		return "complete", ""
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// validate runs `otelcol-otelctx validate` on the files, merged in order,
// with the feature gates and the environment the systemd unit and the
// DaemonSet give the shipped configurations.
func validate(bin string, files ...string) (string, error) {
	args := []string{"validate", "--feature-gates=service.profilesSupport,extension.healthcheck.useComponentStatus"}
	for _, f := range files {
		args = append(args, "--config", f)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "OTELCTX_GATEWAY_ENDPOINT=gateway.example:4317",
		"POD_IP=127.0.0.1", "K8S_NODE_NAME=node-1"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestYAMLExamplesLoad: every YAML example of the README and the docs (the
// operator's pages and the developer's) loads in the built distribution as
// the page shows it. A block with collector sections is a configuration:
// alone it must validate; one whose first line names a shipped
// configuration (`# ... over config/otelctx-production.yaml`) is a fragment
// and must validate merged over that file; one whose first line says
// `refused` must be refused. A block without collector sections (a listing
// of data) must parse.
func TestYAMLExamplesLoad(t *testing.T) {
	bin := testenv.DistBinary(t)
	root := testenv.RepoRoot()
	pages := userPages(t)
	for p := range developerPages {
		pages = append(pages, p)
	}
	counts := map[string]int{}
	for _, page := range pages {
		for _, e := range yamlExamples(page, read(t, page)) {
			kind, base := e.kind(t)
			counts[kind]++
			if kind == "" || kind == "data" {
				continue
			}
			f := filepath.Join(t.TempDir(), "example.yaml")
			if err := os.WriteFile(f, []byte(e.text), 0o644); err != nil {
				t.Fatal(err)
			}
			files := []string{f}
			if base != "" {
				// The base alone loads, so a refusal is the example's.
				if out, err := validate(bin, filepath.Join(root, base)); err != nil {
					t.Fatalf("%s, which %s:%d is merged over, does not load: %v\n%s", base, e.page, e.line, err, out)
				}
				files = []string{filepath.Join(root, base), f}
			}
			out, err := validate(bin, files...)
			switch {
			case kind == "refused" && err == nil:
				t.Errorf("%s:%d: the example says it is refused, and it is accepted (over %q):\n%s", e.page, e.line, base, e.text)
			case kind != "refused" && err != nil:
				t.Errorf("%s:%d: the example does not load (%s, over %q): %v\n%s\n%s", e.page, e.line, kind, base, err, out, e.text)
			}
		}
	}
	t.Logf("YAML examples: %v", counts)
	if counts["complete"] < 5 || counts["over"] < 2 {
		t.Errorf("too few examples found (%v): has the fence or marker convention changed?", counts)
	}
}

// TestYAMLExampleCheckCatches: an example that references an undefined
// exporter, as the README's once did, is refused by the same validation.
func TestYAMLExampleCheckCatches(t *testing.T) {
	bin := testenv.DistBinary(t)
	page := "intro\n\n```yaml\nreceivers:\n  otlp:\n    protocols: {grpc: {}}\nservice:\n  pipelines:\n" +
		"    profiles: {receivers: [otlp], exporters: [debug]}\n```\n\n  ```yaml\n  resource: {process.pid: 1}\n  ```\n"
	ex := yamlExamples("page.md", page)
	if len(ex) != 2 {
		t.Fatalf("%d examples found, want 2", len(ex))
	}
	if k, _ := ex[0].kind(t); k != "complete" {
		t.Errorf("kind %q, want complete", k)
	}
	if k, _ := ex[1].kind(t); k != "data" {
		t.Errorf("indented listing: kind %q, want data", k)
	}
	f := filepath.Join(t.TempDir(), "example.yaml")
	if err := os.WriteFile(f, []byte(ex[0].text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := validate(bin, f); err == nil {
		t.Errorf("an undefined exporter is not refused (%v):\n%s", err, out)
	}
}

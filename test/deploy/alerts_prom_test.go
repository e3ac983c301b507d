// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/otelctx/otelctx/internal/testutil/promrun"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

const alertRules = "deploy/prometheus/otelctx-alerts.yaml"

// agent is one production-configuration collector a test started.
type agent struct {
	*proc
	metrics string // host:port of its Prometheus endpoint
	otlp    string // host:port of its OTLP/HTTP receiver
}

// startAgent runs the production configuration with the unit's gates, its
// gateway at gateway, watching pid only; overridden only where a test must
// (ports, the catalog socket, OTLP/HTTP for the stand-in profiler). The
// metrics reader is the production file's own, on another port. wrap, if
// set, wraps the command (unshare).
func startAgent(t *testing.T, bin, gateway string, pid int, wrap func(bin string, args []string) *exec.Cmd) *agent {
	t.Helper()
	var prod map[string]any
	if err := yaml.Unmarshal([]byte(readRepoFile(t, productionConfig)), &prod); err != nil {
		t.Fatal(err)
	}
	metrics := section(section(section(prod, "service"), "telemetry"), "metrics")
	readers, _ := metrics["readers"].([]any)
	if len(readers) != 1 {
		t.Fatalf("%s: %d metrics readers, want the one Prometheus reader", productionConfig, len(readers))
	}
	prom := section(section(section(readers[0].(map[string]any), "pull"), "exporter"), "prometheus")
	if prom["port"] == nil {
		t.Fatalf("%s: the metrics reader is not a Prometheus pull reader with a port: %v", productionConfig, readers[0])
	}
	mport, hport, health := freePort(t), freePort(t), freePort(t)
	prom["host"], prom["port"] = "127.0.0.1", mport
	dir := t.TempDir()
	overlay := map[string]any{
		"extensions": map[string]any{
			"health_check": map[string]any{"http": map[string]any{"endpoint": fmt.Sprintf("127.0.0.1:%d", health)}},
			"process_ctx": map[string]any{"catalog_endpoint": "unix:" + filepath.Join(dir, "catalog.sock"),
				"include": map[string]any{"pids": []int{pid}}},
		},
		"receivers": map[string]any{"otlp": map[string]any{"protocols": map[string]any{
			"grpc": map[string]any{"endpoint": "127.0.0.1:0"},
			"http": map[string]any{"endpoint": fmt.Sprintf("127.0.0.1:%d", hport)},
		}}},
		"service": map[string]any{"telemetry": map[string]any{"metrics": metrics}},
	}
	b, err := yaml.Marshal(overlay)
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(dir, "test.yaml")
	if err := os.WriteFile(ov, b, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", filepath.Join(repoRoot(t), productionConfig), "--config", ov, productionGates}
	cmd := exec.Command(bin, args...)
	if wrap != nil {
		cmd = wrap(bin, args)
	}
	cmd.Env = append(os.Environ(), "OTELCTX_GATEWAY_ENDPOINT="+gateway)
	a := &agent{proc: startProc(t, cmd), metrics: fmt.Sprintf("127.0.0.1:%d", mport), otlp: fmt.Sprintf("127.0.0.1:%d", hport)}
	waitFor(t, time.Minute, "the agent's metrics endpoint", func() bool {
		if a.exited() {
			t.Fatalf("the agent exited:\n%s", a.output())
		}
		return metricValue(t, mport, "otelcol_process_uptime") > 0
	})
	return a
}

// startGateway runs a second distribution as the agent's gateway: OTLP/gRPC
// into the debug exporter, for the signals given (the others are refused
// as unimplemented, a permanent error to the agent's exporter).
func startGateway(t *testing.T, bin string, signals ...string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var pipelines strings.Builder
	for _, s := range signals {
		fmt.Fprintf(&pipelines, "    %s: {receivers: [otlp], exporters: [debug]}\n", s)
	}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
exporters:
  debug: {verbosity: basic}
service:
  telemetry:
    metrics:
      level: none
  pipelines:
%s`, addr, pipelines.String())
	p := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startProc(t, exec.Command(bin, "--config", p, productionGates))
	g.waitOutput(t, "the gateway ready", regexp.MustCompile(`Everything is ready`), time.Minute)
	return addr
}

// sendProfiles runs the stand-in profiler (test/enrich/demoprofiles: the
// running threads of pid sampled from /proc, sent as an OTLP profile shaped
// like the OTel eBPF profiler's) against the agent over and over until the
// test ends.
func sendProfiles(t *testing.T, a *agent, pid int) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "demoprofiles")
	if out, err := testenv.GoBuild(repoRoot(t), "-o", bin, "./test/enrich/demoprofiles").CombinedOutput(); err != nil {
		t.Fatalf("go build demoprofiles: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			// A round without a running thread sends nothing; the next one will.
			_ = exec.CommandContext(ctx, bin, "-pid", fmt.Sprint(pid), "-duration", "1s", "-endpoint", a.otlp).Run()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// ruleMetrics are the otelcol_* names the rules' expressions use.
func ruleMetrics(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, m := range regexp.MustCompile(`otelcol_[a-z0-9_]+`).FindAllString(readRepoFile(t, alertRules), -1) {
		if !slices.Contains(names, m) {
			names = append(names, m)
		}
	}
	sort.Strings(names)
	return names
}

// scraped are the otelcol_* names Prometheus holds for instance.
func scraped(t *testing.T, p *promrun.Server, instance string) map[string]bool {
	got := map[string]bool{}
	for _, s := range p.Query(t, fmt.Sprintf(`group by (__name__) ({__name__=~"otelcol_.+", instance=%q})`, instance)) {
		got[s.Metric["__name__"]] = true
	}
	return got
}

// alertNames are the alerts of the rule file.
func alertNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s+- alert: (\S+)$`).FindAllStringSubmatch(readRepoFile(t, alertRules), -1) {
		names = append(names, m[1])
	}
	return names
}

// TestAlertsOnRealScrape: the alerting rules evaluated by a real
// Prometheus server scraping the built distribution in its production
// configuration (promrun: the rules' minutes made seconds).
//
// Healthy: a publisher, the stand-in profiler's profiles of it enriched, a
// gateway that takes everything: every metric name the rules use is in the
// scrape, every rule evaluates, and no alert fires over a window longer
// than any alert needs.
//
// Broken: a collector without BTF (thread contexts off) that no profiler
// sends to, then stopped; another whose profiles are all of a process it
// does not watch while a publisher is tracked, its gateway refusing
// every signal it sends: OtelctxNoProfiles, OtelctxThreadContextsOff,
// OtelctxDown, OtelctxNothingEnriched and OtelctxExportFailing fire for the
// collector each is about. (OtelctxStalled, a wedged reader: test/hostile.)
func TestAlertsOnRealScrape(t *testing.T) {
	// A healthy collector has thread contexts: the eBPF sampler must load.
	samplertest.Require(t)
	bin := testenv.DistBinary(t)
	rules := filepath.Join(repoRoot(t), alertRules)
	names := ruleMetrics(t)
	seen := map[string]bool{}

	t.Run("healthy", func(t *testing.T) {
		gw := startGateway(t, bin, "profiles", "logs", "metrics")
		pid := startDemo(t, nil)
		a := startAgent(t, bin, gw, pid, nil)
		sendProfiles(t, a, pid)
		p := promrun.Start(t, rules, a.metrics)
		waitFor(t, 3*time.Minute, "samples enriched in the scrape", func() bool {
			s := p.Query(t, fmt.Sprintf(`otelcol_ctxenrich_samples_enriched{instance=%q} > 0`, a.metrics))
			return len(s) > 0
		})
		start := time.Now()
		if n := p.RuleHealth(t); n != len(alertNames(t)) {
			t.Errorf("prometheus holds %d rules, the file has %d alerts", n, len(alertNames(t)))
		}
		// Absence is observed over a window: Prometheus's rule evaluations
		// past it, each alert had the time it needs to fire.
		t.Logf("observing %v of rule evaluations (the longest for + range of the scaled rules)", p.Window)
		waitFor(t, 5*time.Minute, "rule evaluations spanning the alerts' window", func() bool {
			return p.LastEvaluation(t).After(start.Add(p.Window))
		})
		for k := range scraped(t, p, a.metrics) {
			seen[k] = true
		}
		if fired := p.Query(t, `max_over_time(ALERTS{alertstate="firing"}[10m])`); len(fired) > 0 {
			for _, f := range fired {
				t.Errorf("%s fired on the healthy collector: %v", f.Metric["alertname"], f.Metric)
			}
		}
	})

	t.Run("broken", func(t *testing.T) {
		pid := startDemo(t, nil)
		stranger := startDemo(t, nil) // publishes, but is not the agents' to watch
		full := startGateway(t, bin, "profiles", "logs", "metrics")
		refusing := startGateway(t, bin, "traces") // profiles, metrics, logs: unimplemented
		unshare := testenv.RequireTool(t, "unshare")
		// No BTF (a private mount namespace hides it): thread contexts off.
		idle := startAgent(t, bin, full, pid, func(bin string, args []string) *exec.Cmd {
			return exec.Command(unshare, append([]string{"--mount", "--propagation", "private", "sh", "-c",
				`mount -t tmpfs none /sys/kernel/btf && exec "$0" "$@"`, bin}, args...)...)
		})
		unjoined := startAgent(t, bin, refusing, pid, nil)
		sendProfiles(t, unjoined, stranger)
		p := promrun.Start(t, rules, idle.metrics, unjoined.metrics)
		for _, w := range []struct{ alert, instance string }{
			{"OtelctxNoProfiles", idle.metrics},
			{"OtelctxThreadContextsOff", idle.metrics},
			{"OtelctxNothingEnriched", unjoined.metrics},
			{"OtelctxExportFailing", unjoined.metrics},
		} {
			waitFor(t, 3*time.Minute, w.alert+" firing for "+w.instance, func() bool { return p.Firing(t, w.alert, w.instance) })
		}
		for _, inst := range []string{idle.metrics, unjoined.metrics} {
			for k := range scraped(t, p, inst) {
				seen[k] = true
			}
		}
		for _, quiet := range []struct{ alert, instance string }{
			{"OtelctxNoProfiles", unjoined.metrics}, {"OtelctxNothingEnriched", idle.metrics},
		} {
			if p.Firing(t, quiet.alert, quiet.instance) {
				t.Errorf("%s fires for %s, which it is not about", quiet.alert, quiet.instance)
			}
		}
		idle.stop(30 * time.Second)
		waitFor(t, 3*time.Minute, "OtelctxDown firing for the stopped collector", func() bool {
			return p.Firing(t, "OtelctxDown", idle.metrics)
		})
	})

	// Every name the rules read is one the distribution exposes, as
	// exposed (no _total): in the healthy scrape or, for failure
	// counters, in the broken one.
	if !t.Failed() {
		for _, n := range names {
			if !seen[n] {
				t.Errorf("the rules read %s, which no scrape of the distribution had (scraped: %v)", n, sortedKeys(seen))
			}
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

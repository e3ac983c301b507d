// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/nodepub"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
	"github.com/otelctx/otelctx/internal/watcher"

	"go.opentelemetry.io/collector/component"
)

// The environment of the Node services of TestEnrichEnvironmentNamedNode.
const (
	otelSvcName  = "otelctx-otelsvc"
	otelSvcAttrs = "service.namespace=measure,deployment.environment.name=env%20test"
	// What the dd-trace service's environment says, against its published
	// service.name (otelctx-nodepub): the published resource must win.
	ddEnvName = "otelctx-env-not-published"
)

// TestEnrichEnvironmentNamedNode: a Node.js service traced by the
// OpenTelemetry SDK for Node (from npm), which publishes no process
// context and whose resource the SDK itself takes from OTEL_SERVICE_NAME
// and OTEL_RESOURCE_ATTRIBUTES, gets that service and those attributes on
// at least envFloor of its samples (a stand-in profiler at 997 Hz, the
// process_ctx extension's defaults, ctx_enrich); the same service without
// the variables and every other process get none of them; and a Node.js
// service traced by dd-trace, which publishes its resource and has other
// OTEL_ values in its environment, keeps its published service.name,
// deployment.environment.name and service.version on every sample (the
// environment only fills keys it does not publish: catalog/environ.go).
func TestEnrichEnvironmentNamedNode(t *testing.T) {
	testenv.RequireRoot(t)
	node := nodepub.Node(t, 24)
	sdk := nodepub.OTelSDKModules(t)
	named, res := startOTelSvc(t, node, sdk, "OTEL_SERVICE_NAME="+otelSvcName, "OTEL_RESOURCE_ATTRIBUTES="+otelSvcAttrs)
	// The SDK read the environment itself (the resource it would export).
	for k, want := range map[string]string{"service.name": otelSvcName, "service.namespace": "measure", "deployment.environment.name": "env test"} {
		if res[k] != want {
			t.Fatalf("the OTel SDK's resource: %s=%v, want %q (%v)", k, res[k], want, res)
		}
	}
	bare, _ := startOTelSvc(t, node, sdk)
	dd := nodepub.Start(t, node, []string{"OTEL_SERVICE_NAME=" + ddEnvName, "OTEL_RESOURCE_ATTRIBUTES=service.namespace=not-published"}, "shapes")
	dd.NextReady(t) // its main thread spins in its first step until the test ends

	id := component.MustNewIDWithName("process_ctx", "environnode")
	cfg := watcher.NewDefaultConfig() // environment_resource on, as by default
	cfg.CollectionInterval, cfg.DiscoveryInterval, cfg.RecheckInterval = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	cfg.ThreadSampler = watcher.ThreadSamplerOff
	w, err := watcher.New(watcher.Settings{}, *cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	host := watchertest.NewHost().Add(id, w)
	// The collector runs before the profiler: the dd-trace service is
	// cataloged (its published context) before its first sample.
	testenv.Eventually(t, "the dd-trace service's process context in the catalog", func() bool {
		_, live := w.Catalog().Process(dd.PID)
		return live
	})

	prof, err := fakeprof.Start(997, "otelctx_envnode")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prof.Close() })
	pids := []int{named, bare, dd.PID}
	const least = 1000
	testenv.EventuallyCPU(t, fmt.Sprintf("%d samples of each Node service", least), func() bool {
		n := map[int]int{}
		for _, s := range prof.Samples() {
			n[s.PID]++
		}
		return !slices.ContainsFunc(pids, func(pid int) bool { return n[pid] < least })
	})
	if err := prof.Stop(); err != nil {
		t.Fatal(err)
	}
	samples := prof.Samples()
	slices.SortFunc(samples, func(a, b fakeprof.Sample) int { return a.Time.Compare(b.Time) })

	// 5 s messages, every process of the host in them, as the OTel eBPF
	// profiler reports.
	type tally struct{ samples, full, any, published int }
	got := map[int]*tally{}
	var ddRes map[string]any // the resource of one of the dd-trace service's samples
	for from := 0; from < len(samples); {
		b := newMessage()
		p := b.resource()
		end := samples[from].Time.Add(5 * time.Second)
		i := from
		for ; i < len(samples) && samples[i].Time.Before(end); i++ {
			b.sample(p, samples[i].Time, samples[i].PID, samples[i].TID)
		}
		from = i
		out := enrichWith(t, host, id, b.pd)
		for _, rp := range out.ResourceProfiles().All() {
			res := rp.Resource().Attributes().AsRaw()
			full := res["service.name"] == otelSvcName && res["service.namespace"] == "measure" && res["deployment.environment.name"] == "env test"
			any := res["service.name"] == otelSvcName || res["service.namespace"] == "measure" || res["deployment.environment.name"] == "env test" ||
				res["service.name"] == ddEnvName
			for _, sp := range rp.ScopeProfiles().All() {
				for _, pr := range sp.Profiles().All() {
					for _, s := range pr.Samples().All() {
						pid := samplePID(out, s, res)
						c := got[pid]
						if c == nil {
							c = &tally{}
							got[pid] = c
						}
						c.samples++
						if full {
							c.full++
						}
						if any {
							c.any++
						}
						if res["service.name"] == "otelctx-nodepub" && res["deployment.environment.name"] == "test" && res["service.version"] == "1.0.0" {
							c.published++
						}
						if pid == dd.PID {
							ddRes = res
						}
					}
				}
			}
		}
	}
	n := got[named]
	rate := float64(n.full) / float64(n.samples)
	t.Logf("the OTel SDK service (pid %d): %d of %d samples (%.4f) with %s and its attributes", named, n.full, n.samples, rate, otelSvcName)
	if rate < envFloor {
		t.Errorf("the OTel SDK service: %.4f of its samples got its service and attributes, want at least %.3f", rate, envFloor)
	}
	if d := got[dd.PID]; d.published != d.samples || d.any != 0 {
		t.Errorf("the dd-trace service (pid %d): %d of %d samples with its published resource, %d with its environment's service.name (%v)", dd.PID, d.published, d.samples, d.any, ddRes)
	} else {
		t.Logf("the dd-trace service (pid %d): %d of %d samples with its published resource (%v)", dd.PID, d.published, d.samples, ddRes)
	}
	others, otherSamples := 0, 0
	for pid, c := range got {
		if pid == named {
			continue
		}
		others++
		otherSamples += c.samples
		if pid != dd.PID && c.any != 0 {
			t.Errorf("pid %d: %d of its %d samples got the OTel SDK service's values", pid, c.any, c.samples)
		}
	}
	t.Logf("the same service without the variables (pid %d): %d samples; %d other processes, %d samples, none with the named service's values", bare, got[bare].samples, others, otherSamples)
}

// startOTelSvc starts otelsvc.js with exactly env (and NODE_PATH) and
// returns its PID and the resource its SDK made.
func startOTelSvc(t *testing.T, node, modules string, env ...string) (int, map[string]any) {
	t.Helper()
	cmd := exec.Command(node, testenv.Testdata("node", "otelsvc.js"))
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "NODE_PATH=" + modules}, env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Scan()
		line <- sc.Text()
	}()
	var l string
	select {
	case l = <-line:
	case <-time.After(time.Minute):
		t.Fatal("otelsvc.js said nothing for a minute")
	}
	f := strings.SplitN(l, " ", 3)
	var res map[string]any
	if len(f) != 3 || f[0] != "ready" || json.Unmarshal([]byte(f[2]), &res) != nil {
		t.Fatalf("otelsvc.js: %q", l)
	}
	return cmd.Process.Pid, res
}

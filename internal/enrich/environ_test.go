// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// envProcess starts a real process whose environment is exactly env and
// returns its PID; it is killed when the test ends.
func envProcess(t *testing.T, env ...string) int { return testenv.Sleeper(t, env...).Process.Pid }

// publishAs puts the real process pid in the catalog as a publisher of
// attrs (as discovery would, with its real start time).
func publishAs(t *testing.T, c *catalog.Catalog, pid int, attrs ...string) {
	t.Helper()
	ticks, err := procstat.StartTicks("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	p := &publisher.Process{ID: publisher.ProcessID{PID: pid, StartTicks: ticks}, UID: -1, MappingAddr: 0x1000}
	for i := 0; i+1 < len(attrs); i += 2 {
		p.Context.Resource.Attributes = append(p.Context.Resource.Attributes, strAttr(attrs[i], attrs[i+1]))
	}
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
}

// byPID gives, per PID, the resources (as raw maps) holding its samples
// and how many samples each.
func byPID(t *testing.T, pd pprofile.Profiles) map[int64][]map[string]any {
	t.Helper()
	out := map[int64][]map[string]any{}
	for r, rp := range pd.ResourceProfiles().All() {
		for i := range countSamples(rp) {
			sa := sampleAttrs(t, pd, sampleAt(pd, r, i))
			pid, _ := sa["process.pid"].(int64)
			if pid == 0 {
				pid, _ = rp.Resource().Attributes().AsRaw()["process.pid"].(int64)
			}
			out[pid] = append(out[pid], rp.Resource().Attributes().AsRaw())
		}
	}
	return out
}

// TestEnvironmentNamesProcess: a process that publishes nothing but sets
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES gets that resource on its
// samples; one that sets neither gets nothing, and neither do samples of
// another process.
func TestEnvironmentNamesProcess(t *testing.T) {
	named := envProcess(t, "PATH=/bin", "OTEL_SERVICE_NAME=inventory",
		"OTEL_RESOURCE_ATTRIBUTES=service.namespace=shop,deployment.environment.name=prod%20eu,service.name=ignored")
	bare := envProcess(t, "PATH=/bin")
	invalid := envProcess(t, "OTEL_RESOURCE_ATTRIBUTES=service.name=x,bad=%zz")
	var many strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&many, "k%d=v,", i)
	}
	// Thousands of pairs: the list is dropped whole, the service name stays.
	crowded := envProcess(t, "OTEL_SERVICE_NAME=crowded", "OTEL_RESOURCE_ATTRIBUTES="+many.String())
	c := testCatalog(t)
	h := newHarness(t, c, testPolicy())

	b := newProfBuilder()
	p := b.Resource(map[string]any{"host.name": "profiler-host"})
	now := time.Now()
	for _, pid := range []int{named, bare, invalid, named, crowded} {
		b.Sample(p, now, append(b.Thread(pid), b.Attr("process.pid", int64(pid)))...)
	}
	out := h.run(b.PD)
	got := byPID(t, out)
	for _, r := range got[int64(named)] {
		if r["service.name"] != "inventory" || r["service.namespace"] != "shop" || r["deployment.environment.name"] != "prod eu" ||
			r["host.name"] != "profiler-host" || r["process.pid"] != int64(named) {
			t.Errorf("named process's resource: %v", r)
		}
	}
	if len(got[int64(named)]) != 2 {
		t.Errorf("named process: %d samples, want 2", len(got[int64(named)]))
	}
	for _, pid := range []int{bare, invalid} {
		for _, r := range got[int64(pid)] {
			if _, ok := r["service.name"]; ok {
				t.Errorf("pid %d, which names no service, got %v", pid, r)
			}
		}
	}
	for _, r := range got[int64(crowded)] {
		if r["service.name"] != "crowded" || r["k0"] != nil {
			t.Errorf("crowded process's resource: %v", r)
		}
	}
	if n := h.cnt.JoinedEnv; n != 2 {
		t.Errorf("resources joined from the environment: %d, want 2", n)
	}
}

// TestEnvironmentFillsPublished: for a publisher, the published resource
// wins and the environment fills the keys it lacks.
func TestEnvironmentFillsPublished(t *testing.T) {
	pid := envProcess(t, "OTEL_SERVICE_NAME=from-env", "OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=staging,service.version=0.9")
	c := testCatalog(t)
	publishAs(t, c, pid, "service.name", "published", "service.version", "1.0")
	h := newHarness(t, c, testPolicy())
	b := newProfBuilder()
	p := b.Resource(map[string]any{"process.pid": int64(pid)})
	b.Sample(p, time.Now(), b.Thread(pid)...)
	r := h.run(b.PD).ResourceProfiles().At(0).Resource().Attributes().AsRaw()
	if r["service.name"] != "published" || r["service.version"] != "1.0" || r["deployment.environment.name"] != "staging" {
		t.Fatalf("resource %v", r)
	}
	if n := (h.cnt.Joined - h.cnt.JoinedEnv); n != 1 {
		t.Errorf("resources joined from a process context: %d, want 1", n)
	}
}

// TestProfilerGroupedByService feeds profiles shaped like the OTel eBPF
// profiler's when it names resources itself (one ResourceProfiles per
// service.namespace, service.name, service.instance.id, from the same
// environment variables; samples of several PIDs of one service): a
// sample's service never changes but by the documented precedence
// (published context > environment > what the profile carried), and with
// published_wins emptied the profile's service stays.
func TestProfilerGroupedByService(t *testing.T) {
	envA := []string{"OTEL_SERVICE_NAME=orders", "OTEL_RESOURCE_ATTRIBUTES=service.namespace=shop"}
	a1, a2 := envProcess(t, envA...), envProcess(t, envA...)
	b1 := envProcess(t, "OTEL_SERVICE_NAME=billing", "OTEL_RESOURCE_ATTRIBUTES=service.namespace=shop")
	// A publisher the profiler grouped by its environment: its process
	// context names it otherwise.
	pub := envProcess(t, envA...)
	unnamed := envProcess(t, "PATH=/bin")

	build := func() (pprofile.Profiles, map[int]string) {
		b := newProfBuilder()
		carried := map[int]string{}
		now := time.Now()
		for _, g := range []struct {
			service string
			pids    []int
		}{{"orders", []int{a1, a2, pub, a1}}, {"billing", []int{b1, unnamed, b1}}} {
			p := b.Resource(map[string]any{"service.name": g.service, "service.namespace": "shop", "host.name": "h"})
			for _, pid := range g.pids {
				b.Sample(p, now, append(b.Thread(pid), b.Attr("process.pid", int64(pid)))...)
				carried[pid] = g.service
			}
		}
		return b.PD, carried
	}
	check := func(t *testing.T, out pprofile.Profiles, want map[int]string, n int) {
		t.Helper()
		total := 0
		for pid, rs := range byPID(t, out) {
			for _, r := range rs {
				total++
				if r["service.name"] != want[int(pid)] || r["service.namespace"] != "shop" {
					t.Errorf("pid %d: sample's resource %v, want service %q", pid, r, want[int(pid)])
				}
			}
		}
		if total != n {
			t.Errorf("%d samples out, want %d", total, n)
		}
	}

	t.Run("default policy", func(t *testing.T) {
		c := testCatalog(t)
		publishAs(t, c, pub, "service.name", "orders-v2")
		h := newHarness(t, c, testPolicy())
		in, carried := build()
		want := map[int]string{}
		for pid, s := range carried {
			want[pid] = s
		}
		want[pub] = "orders-v2" // published context > environment > profile
		check(t, h.run(in), want, 7)
	})
	t.Run("published_wins emptied", func(t *testing.T) {
		c := testCatalog(t)
		publishAs(t, c, pub, "service.name", "orders-v2")
		cfg := testPolicy()
		cfg.PublishedWins = nil
		h := newHarness(t, c, cfg)
		in, carried := build()
		check(t, h.run(in), carried, 7) // the profile's service stays for every sample
	})
}

// TestEnvLookupBudget: a message naming more PIDs the catalog does not
// hold than its /proc look-up budget leaves the rest unjoined and counted
// (lookup_budget); PIDs found absent are remembered for data taken by
// then, so the same samples sent again cost no look-up, and after as many
// messages as the budget needs every PID is settled: the process that
// names itself in its environment is joined, none is over budget.
func TestEnvLookupBudget(t *testing.T) {
	named := envProcess(t, "OTEL_SERVICE_NAME=inventory")
	const absent = 1000
	c := testCatalog(t)
	b := newProfBuilder()
	p := b.Resource(map[string]any{"host.name": "profiler-host"})
	now := time.Now()
	// PIDs past the largest pid_max (2^22): never held.
	pids := []int{named}
	for i := range absent {
		pids = append(pids, 1<<22+1+i)
	}
	for _, pid := range pids {
		b.Sample(p, now, b.Attr("process.pid", int64(pid)))
	}
	budget := catalog.DefaultEnvLookups
	msgs := (len(pids) + budget - 1) / budget
	for m := range msgs + 1 {
		h := newHarness(t, c, testPolicy())
		in := pprofile.NewProfiles()
		b.PD.CopyTo(in)
		h.run(in)
		over := h.cnt.Unmatched[reasonLookupBudget]
		want := max(0, int64(len(pids)-(m+1)*budget))
		if over != want {
			t.Errorf("message %d: %d samples over the look-up budget, want %d", m, over, want)
		}
		if over != h.cnt.LookupBudget {
			t.Errorf("message %d: %d samples but %d PIDs over the budget (one sample each)", m, over, h.cnt.LookupBudget)
		}
		if m == msgs && h.cnt.JoinedEnv != 1 {
			t.Errorf("message %d: %d resources joined from the environment, want 1", m, h.cnt.JoinedEnv)
		}
	}
}

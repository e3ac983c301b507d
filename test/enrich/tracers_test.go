// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich_test

import (
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/ebpfwatch"
	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/nodepub"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/testutil/tracersvc"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// TestEnrichFollowingTracers: TestEnrichFollowingNode's followed run with
// the services of dd-trace-py and the Datadog Java agent (make
// tracer-deps): a request thread switches between 300 requests (a root
// and a nested span each) of 10 ms of its CPU time on a busy host; every
// profiler sample inside a span is linked to it (>= 99.9 %) or left
// unlinked, and none to another. The extension watches the service from
// its exec (and a forked Python worker from its fork, with its own
// service.instance.id); the log says how long after that the first sample
// was linked. A starved run is measured again; a wrong link fails at once.
func TestEnrichFollowingTracers(t *testing.T) {
	samplertest.Require(t)
	for _, tc := range []struct {
		name string
		fork bool
	}{{"python", false}, {"python-fork", true}, {"java", false}} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := func(t *testing.T) *exec.Cmd {
				if strings.HasPrefix(tc.name, "java") {
					return tracersvc.JavaCmd(t, tracersvc.JDK(t, 17), "otelctx-follow-"+tc.name, "platform")
				}
				return tracersvc.PythonCmd(t, "otelctx-follow-"+tc.name)
			}
			cmd(t) // skips (fails under CI) before the attempts when the tracer is missing
			testenv.MeasureFloors(t, func(t *testing.T) []string { return followTracer(t, tc.name, tc.fork, cmd(t)) })
		})
	}
}

func followTracer(t *testing.T, name string, fork bool, cmd *exec.Cmd) (misses []string) {
	startHogs(t, hogsPerCore*runtime.NumCPU())
	const spans, ms = 300, 10
	prog := "otelctx_test_tr"
	follow := func(cfg *processctxextension.Config) { cfg.ThreadContext.FollowPrograms = []string{prog} }
	svc := tracersvc.Launch(t, cmd)
	started := time.Now() // the exec, as near as the test knows it
	pid := svc.PID
	var rcvID component.ID
	var cat *catalog.Catalog
	if !fork {
		rcvID, cat = ebpfwatch.StartWith(t, pid, follow)
	}
	prof, err := fakeprof.Start(997, prog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prof.Close() })
	svc.WaitListening(t)
	path := fmt.Sprintf("/switch?spans=%d&ms=%d", spans, ms)
	if fork {
		answer := <-svc.Get(path + "&fork=1")
		child, err := strconv.Atoi(strings.TrimSpace(answer))
		if err != nil {
			t.Fatalf("/switch&fork=1 answered %q", answer)
		}
		pid, started = child, time.Now()
		// It holds the service's stdout: killed first, or the service's
		// cleanup would wait for it.
		t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
		rcvID, cat = ebpfwatch.StartWith(t, pid, follow)
	} else {
		svc.Get(path)
	}
	warm := svc.NextReady(t) // the request thread spins in its warm-up span
	tid := warm.TID
	// The profiler's process.executable.path: the join checks it.
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	if fork {
		parent, worker := instance(t, svc.PID), instance(t, pid)
		if parent == worker || worker == "" {
			t.Errorf("the forked worker's service.instance.id %q, the parent's %q: want its own", worker, parent)
		}
	}
	from := time.Now().UnixNano()
	testenv.EventuallyWithin(t, 2*time.Minute, "an observation of the request thread at the profiler's samples (the receiver follows it)", func() bool {
		return catalogExact(cat, pid, tid, from)
	})
	svc.Release(t, "warm")
	if l := svc.Line(t); l != fmt.Sprintf("done %d", pid) {
		t.Fatalf("service: %q", l)
	}
	truth, err := nodepub.ReadSwitchTruth(filepath.Join(svc.Dir, fmt.Sprintf("truth-%d", pid)))
	if err != nil {
		t.Fatal(err)
	}
	if err := prof.Stop(); err != nil {
		t.Fatal(err)
	}
	r := &run{tid: tid, truth: truth}
	for _, s := range prof.Samples() {
		if _, in := spanAtBoot(truth, s.BootNs); in && s.TID == tid {
			r.times = append(r.times, prof.WallTime(s.BootNs).UnixNano())
		}
	}
	slices.Sort(r.times)
	svc.Kill()
	testenv.Eventually(t, "the receiver to notice the service's exit", func() bool {
		_, live := cat.Process(pid)
		return !live
	})
	if len(r.times) == 0 {
		return []string{"the profiler took no sample inside the spans"}
	}
	out := enrich(t, rcvID, profilesFor(pid, exe, []*run{r}))
	c := classify(t, out, truth)
	n := c.right + c.wrong + c.unlinked
	if n < minSamples {
		return []string{fmt.Sprintf("the profiler took only %d samples inside the switched spans", n)}
	}
	right := float64(c.right) / float64(n)
	ms3 := func(ns int64) string { return time.Duration(ns).Round(time.Millisecond).String() }
	first := "none"
	if c.firstLinked != 0 {
		// The first span starts when the service serves its first request.
		first = fmt.Sprintf("%s (%s to its first span, then %s)", ms3(c.firstLinked-started.UnixNano()),
			ms3(truth.Spans[0].RealStart-started.UnixNano()), ms3(c.firstLinked-truth.Spans[0].RealStart))
	}
	t.Logf("%s: spans of %d ms, profiler 997 Hz, %d hogs, followed: %d samples: %d right (%.2f %%), %d wrong, %d unlinked; from %s to the first linked sample: %s",
		name, ms, hogsPerCore*runtime.NumCPU(), n, c.right, 100*right, c.wrong, c.unlinked, map[bool]string{false: "exec", true: "fork"}[fork], first)
	if c.wrong > 0 {
		t.Errorf("%d of %d samples linked to a wrong span", c.wrong, n)
	}
	if right < 0.999 {
		misses = append(misses, fmt.Sprintf("%.2f %% right < 99.9 %%", 100*right))
	}
	return misses
}

// instance is pid's published service.instance.id, once it publishes.
func instance(t *testing.T, pid int) string {
	t.Helper()
	s, err := scan.New(scan.Options{ProcRoot: "/proc"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var p *publisher.Process
	testenv.Eventually(t, fmt.Sprintf("the process context of %d", pid), func() bool {
		p, err = s.ReadPID(pid)
		return err == nil && p.MappingAddr != 0
	})
	v, _ := processctx.Lookup(p.Context.Resource.Attributes, "service.instance.id")
	return v.AsString()
}

type classified struct {
	right, wrong, unlinked int
	// firstLinked: the earliest sample linked to its span, the warm-up
	// span's included (wall ns).
	firstLinked int64
}

// classify scores the processed samples against the truth: those of the
// warm-up span (span 0, whose start the receiver may not have seen) only
// for the first linked sample; the switched spans' as right, wrong or
// unlinked.
func classify(t *testing.T, pd pprofile.Profiles, truth threadpub.SwitchTruth) classified {
	t.Helper()
	var c classified
	dict := pd.Dictionary()
	for _, rp := range pd.ResourceProfiles().All() {
		for _, spr := range rp.ScopeProfiles().All() {
			for _, prof := range spr.Profiles().All() {
				for _, s := range prof.Samples().All() {
					ts := int64(s.TimestampsUnixNano().At(0))
					want := spanAt(truth, ts)
					linked := s.LinkIndex() > 0
					ok := false
					if linked {
						l := dict.LinkTable().At(int(s.LinkIndex()))
						traceID, spanID := l.TraceID(), l.SpanID()
						ok = hex.EncodeToString(traceID[:]) == want.TraceID && hex.EncodeToString(spanID[:]) == want.SpanID
						if !ok && want.Index != 0 {
							t.Errorf("sample at %d in span %d (%s) linked to %s", ts, want.Index, want.SpanID, hex.EncodeToString(spanID[:]))
						}
					}
					if ok && (c.firstLinked == 0 || ts < c.firstLinked) {
						c.firstLinked = ts
					}
					switch {
					case want.Index == 0:
					case !linked:
						c.unlinked++
					case ok:
						c.right++
					default:
						c.wrong++
					}
				}
			}
		}
	}
	return c
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package node_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/testutil/nodepub"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// TestSamplerShapes: the eBPF sampler's walk (sampler.bpf.c), at its own
// ticks on the spinning thread, reads the span of each shape, and no record
// when none is active; no walk fails its checks.
func TestSamplerShapes(t *testing.T) {
	samplertest.Require(t)
	for _, major := range nodepub.Majors {
		t.Run(fmt.Sprintf("node%d", major), func(t *testing.T) { samplerShapes(t, major) })
	}
}

type capture struct {
	mu   sync.Mutex
	byID map[int][]sampler.Sample // by TID
}

func (c *capture) add(s sampler.Sample) {
	c.mu.Lock()
	c.byID[s.TID] = append(c.byID[s.TID], s)
	c.mu.Unlock()
}

// since returns the TID's samples after the first n and how many it has.
func (c *capture) since(tid, n int) ([]sampler.Sample, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	all := c.byID[tid]
	return append([]sampler.Sample(nil), all[min(n, len(all)):]...), len(all)
}

func samplerShapes(t *testing.T, major int) {
	p := nodepub.Start(t, nodepub.Node(t, major), acfEnv(major), "shapes")
	tl := nodepub.Context(t, p.PID)
	v, err := registry.Locate(tl, func() (*tlsvar.Location, error) { return tlsvar.Resolve("/proc", p.PID) })
	if err != nil {
		t.Fatal(err)
	}
	s, err := sampler.New(sampler.Options{FrequencyHz: 997})
	if err != nil {
		t.Fatal(err)
	}
	c := &capture{byID: map[int][]sampler.Sample{}}
	done := make(chan error, 1)
	go func() { done <- s.Run(c.add, nil) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	if err := s.TrackTarget(sampler.Target{PID: p.PID, StartTicks: startTicks(t, p.PID), Thread: &v}); err != nil {
		t.Fatal(err)
	}
	for {
		r, ok := p.NextReady(t)
		if !ok {
			break
		}
		tid := p.PID
		if r.Thread == "worker" {
			tid = nodepub.WorkerTID(t, p.PID, tl)
		}
		_, n := c.since(tid, 0)
		// The thread spins in the step: wait for 20 samples of it.
		var got []sampler.Sample
		testenv.Eventually(t, r.Name+": 20 samples of the spinning thread", func() bool {
			got, _ = c.since(tid, n)
			return len(got) >= 20
		})
		p.Release(t, r.Name)
		checkSamples(t, r, got)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for r, n := range st.Refused {
		if r.Read == schema.ReadNodeWalk && n > 0 {
			t.Errorf("walks that did not check out: %+v", st)
		}
	}
	// A read in the tick cannot fault a page in: one V8 has just released
	// or not yet touched again (a GC moves objects) fails the capture, and
	// that sample has no record. Rare, never wrong data; many would be a bug.
	if st.Failures > st.Samples/100 {
		t.Errorf("%d of %d captures faulted (more than 1%%): %+v", st.Failures, st.Samples, st)
	} else if st.Failures > 0 {
		t.Logf("%d of %d captures faulted (a page not resident at the tick)", st.Failures, st.Samples)
	}
}

// checkSamples: the step's samples all show its span, or none. The first
// few may predate the step (the thread was between steps).
func checkSamples(t *testing.T, r nodepub.Ready, got []sampler.Sample) {
	t.Helper()
	want := r.TraceID + " " + r.SpanID
	right, other := 0, map[string]int{}
	for _, s := range got[5:] {
		seen := " "
		if s.Record != nil {
			if rec, err := threadctx.Parse(s.Record); err == nil {
				seen = rec.TraceID.String() + " " + rec.SpanID.String()
			}
		}
		if seen == want {
			right++
		} else {
			other[seen]++
		}
	}
	if len(other) > 0 {
		t.Errorf("%s: %d samples with %q, others: %v", r.Name, right, want, other)
	}
}

func startTicks(t *testing.T, pid int) uint64 {
	t.Helper()
	ticks, err := procstat.StartTicks("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	return ticks
}

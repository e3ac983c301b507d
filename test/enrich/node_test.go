// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/testutil/ebpfwatch"
	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/nodepub"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// TestEnrichFollowingNode: TestEnrichFollowing's followed run with a Node.js
// publisher (Node 24, dd-trace with DD_TRACE_OTEL_CTX_ENABLED=true): a
// worker thread switches between 300 spans of 10 ms, each entered by
// dd-trace on an async continuation, on a busy host; every profiler sample
// inside a span is linked to it (>= 99 %) or left unlinked, and at most
// 0.1 % to another. A starved run (too few samples, or fewer right) is
// measured again; a wrong link fails at once.
func TestEnrichFollowingNode(t *testing.T) {
	samplertest.Require(t)
	node := nodepub.Node(t, 24)
	testenv.MeasureFloors(t, func(t *testing.T) []string { return followNode(t, node) })
}

func followNode(t *testing.T, node string) (misses []string) {
	startHogs(t, hogsPerCore*runtime.NumCPU())
	const spans, ms = 300, 10
	p := nodepub.Start(t, node, nil, "switch", strconv.Itoa(spans), strconv.Itoa(ms))
	warm, _ := p.NextReady(t) // the worker spins in its warm-up span
	tl := nodepub.Context(t, p.PID)
	tid := nodepub.WorkerTID(t, p.PID, tl)
	name := "otelctx_test_pr"
	rcvID, cat := ebpfwatch.StartWith(t, p.PID, func(cfg *processctxextension.Config) {
		cfg.ThreadContext.FollowPrograms = []string{name}
	})
	prof, err := fakeprof.Start(997, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prof.Close() })
	from := time.Now().UnixNano()
	testenv.EventuallyWithin(t, 30*time.Second, "an observation of the worker at the profiler's samples (the receiver follows it)", func() bool {
		return catalogExact(cat, p.PID, tid, from)
	})
	p.Release(t, warm.Name)
	if l := p.Line(t); l != "done" {
		t.Fatalf("node publisher: %q", l)
	}
	truth, err := nodepub.ReadSwitchTruth(filepath.Join(p.Dir, "truth"))
	if err != nil {
		t.Fatal(err)
	}
	if err := prof.Stop(); err != nil {
		t.Fatal(err)
	}
	r := &run{worker: 0, spans: spans, ms: ms, tid: tid, truth: truth, bySpanID: map[string]threadpub.Span{}, firstSeen: map[string]int64{}}
	for _, s := range truth.Spans {
		r.bySpanID[s.SpanID] = s
		r.firstSeen[s.SpanID] = 0
	}
	for _, s := range prof.Samples() {
		if _, in := spanAtBoot(truth, s.BootNs); in && s.TID == tid {
			r.times = append(r.times, prof.WallTime(s.BootNs).UnixNano())
		}
	}
	slices.Sort(r.times)
	if len(r.times) < minSamples {
		return []string{fmt.Sprintf("the profiler took only %d samples inside the spans", len(r.times))}
	}
	waitGone(t, p, cat)
	out := enrich(t, rcvID, profilesFor(p.PID, node, []*run{r}))
	score(t, out, p.PID, []*run{r})
	n := len(r.times)
	right := float64(r.matched) / float64(n)
	t.Logf("node: spans of %d ms, profiler 997 Hz, %d hogs, followed: %d samples: %d right (%.2f %%), %d wrong, %d unlinked",
		ms, hogsPerCore*runtime.NumCPU(), n, r.matched, 100*right, r.wrong, r.unlinked)
	if r.wrong*1000 > n {
		t.Errorf("%d of %d samples linked to a wrong span (> 0.1 %%)", r.wrong, n)
	}
	if right < 0.99 {
		misses = append(misses, fmt.Sprintf("%.2f %% right < 99 %%", 100*right))
	}
	return misses
}

// waitGone kills the publisher and waits for the catalog to see it exit:
// samples are joined afterwards, as a profiler's report is.
func waitGone(t *testing.T, p *nodepub.Publisher, cat *catalog.Catalog) {
	t.Helper()
	p.Kill()
	testenv.Eventually(t, "the receiver to notice the publisher's exit", func() bool {
		_, live := cat.Process(p.PID)
		return !live
	})
}

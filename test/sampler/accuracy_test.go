// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package sampler_test checks the eBPF thread sampler end to end against
// ground truth: C publishers whose busy threads switch spans at known
// times (testdata/publishers "switch"), read by the real BPF program, and
// through the process_ctx receiver into the catalog's history. It also holds
// the sampler's overhead benchmarks (BENCHMARKS.md, "Thread context (eBPF
// sampler)").
package sampler_test

import (
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/testutil/ebpfwatch"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

func TestMain(m *testing.M) { os.Exit(threadpub.Main(m)) }

// collector gathers samples on Run's goroutine.
type collector struct {
	mu      sync.Mutex
	samples []sampler.Sample
}

func (c *collector) onSample(s sampler.Sample) {
	c.mu.Lock()
	c.samples = append(c.samples, s)
	c.mu.Unlock()
}

// runSampler starts a sampler tracking pid; stop closes it and returns
// what it delivered.
func runSampler(tb testing.TB, opts sampler.Options, pid int) (s *sampler.Sampler, stop func() []sampler.Sample) {
	tb.Helper()
	return runSamplerFunc(tb, opts, pid, nil)
}

// runSamplerFunc is runSampler with consume called for every sample
// instead of collecting them (nil: collect).
func runSamplerFunc(tb testing.TB, opts sampler.Options, pid int, consume func(sampler.Sample)) (s *sampler.Sampler, stop func() []sampler.Sample) {
	tb.Helper()
	loc, err := tlsvar.Resolve("/proc", pid)
	if err != nil {
		tb.Fatal(err)
	}
	s, err = sampler.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Track(pid, loc); err != nil {
		_ = s.Close()
		tb.Fatal(err)
	}
	c := &collector{}
	if consume == nil {
		consume = c.onSample
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(consume, nil) }()
	var once sync.Once
	stop = func() []sampler.Sample {
		once.Do(func() {
			_ = s.Close()
			if err := <-done; err != nil {
				tb.Error(err)
			}
		})
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.samples
	}
	tb.Cleanup(func() { stop() })
	return s, stop
}

// verdict classifies one sample of a switching thread against its truth.
type verdict int

const (
	match     verdict = iota // inside a span, the span's record
	none                     // before the first span or after the withdrawal: no record, as expected
	ambiguous                // within a switch (between one span's END and the next's START)
	mismatch                 // anything else
)

func idOf(rec []byte) (trace, span string, ok bool) {
	if rec == nil {
		return "", "", false
	}
	r, err := threadctx.Parse(rec)
	if err != nil {
		return "", "", false // valid != 1: the flip writer's "no record"
	}
	return hex.EncodeToString(r.TraceID[:]), hex.EncodeToString(r.SpanID[:]), true
}

// classify: t is the sample's time in the truth's clock (boot ns).
func classify(truth threadpub.SwitchTruth, t uint64, rec []byte) verdict {
	trace, span, has := idOf(rec)
	sp := truth.Spans
	switch {
	case t < sp[0].BootStart:
		// Before the first span became visible: nothing yet, or the first
		// span in the instant it was being published.
		if !has {
			return none
		}
		if span == sp[0].SpanID {
			return ambiguous
		}
		return mismatch
	case t > truth.DoneBoot:
		if !has {
			return none
		}
		return mismatch
	}
	for i, s := range sp {
		if t >= s.BootStart && t <= s.BootEnd {
			if has && trace == s.TraceID && span == s.SpanID {
				return match
			}
			return mismatch
		}
		if t < s.BootStart && i > 0 && t > sp[i-1].BootEnd {
			// Switching from span i-1 to i: either, or none (the swap
			// writer's NULL, the flip writer's valid=0) is right.
			if !has || span == s.SpanID || span == sp[i-1].SpanID {
				return ambiguous
			}
			return mismatch
		}
	}
	// After the last span's END, before the withdrawal completed.
	if !has || span == sp[len(sp)-1].SpanID {
		return ambiguous
	}
	return mismatch
}

// Every record the sampler reports for a switching thread is the span the
// thread had at the sample's time (CLOCK_BOOTTIME on both sides: the
// kernel's bpf_ktime_get_boot_ns and the thread's clock_gettime).
func TestSamplerAccuracy(t *testing.T) {
	samplertest.Require(t)
	for _, cell := range []threadpub.Cell{
		{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC, Writer: threadpub.PointerSwap},
		{Libc: threadpub.Glibc, Where: threadpub.SharedLib, Dialect: threadpub.TLSDESC, Writer: threadpub.ValidFlip},
	} {
		t.Run(fmt.Sprint(cell), func(t *testing.T) {
			// A starved run (few samples) is measured again; a sample
			// showing another span fails at once.
			testenv.MeasureFloors(t, func(t *testing.T) []string { return samplerAccuracy(t, cell) })
		})
	}
}

func samplerAccuracy(t *testing.T, cell threadpub.Cell) (misses []string) {
	p := threadpub.Start(t, cell)
	p.Threads(2)
	_, stop := runSampler(t, sampler.Options{FrequencyHz: 997}, p.PID)
	dir := t.TempDir()
	// Two busy threads on two CPUs, spans of 20 and 7 ms: the short
	// ones are about seven ticks at 997 Hz.
	runs := []struct{ n, ms int }{{40, 20}, {100, 7}}
	tids := make([]int, len(runs))
	for k, r := range runs {
		tids[k] = p.Switch(k, r.n, r.ms, fmt.Sprintf("%s/%d", dir, k))
	}
	for k := range runs {
		p.Wait(k)
	}
	samples := stop()
	for k, r := range runs {
		truth, err := threadpub.ReadSwitchTruth(fmt.Sprintf("%s/%d", dir, k))
		if err != nil {
			t.Fatal(err)
		}
		var counts [4]int
		spans := map[string]bool{}
		for _, s := range samples {
			if s.TID != tids[k] {
				continue
			}
			v := classify(truth, s.BootNs, s.Record)
			counts[v]++
			if v == mismatch {
				_, span, _ := idOf(s.Record)
				t.Errorf("worker %d: sample at boot %d shows span %q (record %d bytes): not the span of that time", k, s.BootNs, span, len(s.Record))
			}
			if v == match {
				_, span, _ := idOf(s.Record)
				spans[span] = true
			}
		}
		total := counts[match] + counts[none] + counts[ambiguous] + counts[mismatch]
		t.Logf("worker %d (%d spans × %d ms): %d samples: %d match, %d no-record outside the run, %d ambiguous (within a switch), %d mismatched; %d of %d spans seen",
			k, r.n, r.ms, total, counts[match], counts[none], counts[ambiguous], counts[mismatch], len(spans), r.n)
		// 997 Hz on a thread busy for 800 ms: hundreds of samples
		// unless the machine starves it.
		if counts[match] < 100 {
			misses = append(misses, fmt.Sprintf("worker %d: only %d matching samples", k, counts[match]))
		}
	}
	return misses
}

// The receiver's path: samples go through the eBPF mode of the process_ctx
// receiver into the catalog's history; every run of observations kept for a
// switching thread lies inside the span it shows (wall clock now: the
// sampler converts boot time with a measured offset), and ThreadAt at the
// middle of a span answers that span or, when no sample fell in its first
// half, an earlier one, never a later one.
// A starved run (few spans seen in their first half) is measured again; a
// run outside its span fails at once.
func TestCatalogAccuracy(t *testing.T) {
	samplertest.Require(t)
	testenv.MeasureFloors(t, catalogAccuracy)
}

func catalogAccuracy(t *testing.T) (misses []string) {
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.SharedLib, Dialect: threadpub.TLSDESC})
	p.Threads(1)

	_, cat := ebpfwatch.Start(t, p.PID, 997)
	cat.SetHistoryLimits(4096, 0) // keep the whole run
	// Tracked once a sample of a busy thread shows up.
	p.Set(0, threadpub.Record{TraceID: [16]byte{9}, SpanID: [8]byte{9}})
	testenv.Eventually(t, "the worker's record in the catalog", func() bool {
		p.Do("spin 0 10")
		_, _, ok := cat.Thread(p.PID, p.Info(0).TID)
		return ok
	})

	path := t.TempDir() + "/truth"
	tid := p.Switch(0, 60, 10, path)
	p.Wait(0)
	truth, err := threadpub.ReadSwitchTruth(path)
	if err != nil {
		t.Fatal(err)
	}
	bySpan, pos := map[string]threadpub.Span{}, map[string]int{}
	for j, s := range truth.Spans {
		bySpan[s.SpanID], pos[s.SpanID] = s, j
	}
	// visible is when span j's record could be seen: after the previous
	// span's end was read, before the next one's start was read (a worker
	// preempted between a clock read and its switch widens the gap).
	visible := func(j int) (lo, hi int64) {
		lo, hi = math.MinInt64, truth.DoneReal
		if j > 0 {
			lo = truth.Spans[j-1].RealEnd
		}
		if j+1 < len(truth.Spans) {
			hi = truth.Spans[j+1].RealStart
		}
		return lo, hi
	}
	// Two clock reads make each wall-clock bound: allow 200 µs around them.
	const slack = int64(200 * time.Microsecond)
	runsIn, runsEdge := 0, 0
	for _, o := range cat.History(p.PID, tid) {
		if o.Record == nil {
			continue
		}
		span := hex.EncodeToString(o.Record.Record.SpanID[:])
		if o.Record.Record.SpanID == [8]byte{9} { // the set-up record: replaced by span 0
			if o.Last.UnixNano() > truth.Spans[0].RealStart+slack {
				t.Errorf("the set-up record seen at %v, after span 0 started", o.Last)
			}
			continue
		}
		s, ok := bySpan[span]
		first, last := o.First.UnixNano(), o.Last.UnixNano()
		lo, hi := visible(pos[span])
		switch {
		case !ok:
			t.Errorf("run %v–%v shows span %s, not one of the run's", o.First, o.Last, span)
		case first >= s.RealStart && last <= s.RealEnd:
			runsIn++
		case first >= s.RealStart-slack && last <= s.RealEnd+slack:
			runsEdge++
		case first >= lo-slack && last <= hi+slack:
			runsEdge++ // inside the switch's window, widened by a preemption
		default:
			t.Errorf("span %s (%d–%d) seen from %d to %d: outside it", span, s.RealStart, s.RealEnd, first, last)
		}
	}
	hits, earlier := 0, 0
	for i, s := range truth.Spans {
		mid := time.Unix(0, s.RealStart+(s.RealEnd-s.RealStart)/2)
		r, _, ok := cat.ThreadAt(p.PID, tid, mid)
		if !ok || r == nil {
			continue
		}
		got, known := bySpan[hex.EncodeToString(r.Record.SpanID[:])]
		switch {
		case known && got.Index == i:
			hits++
		case !known || got.Index < i:
			earlier++ // no sample in the first half of span i yet
		default:
			t.Errorf("ThreadAt(middle of span %d) = span %d: a later span", i, got.Index)
		}
	}
	t.Logf("catalog history: %d runs inside their span, %d within %v of its bounds; ThreadAt(span middle): %d of %d spans exact, %d an earlier record",
		runsIn, runsEdge, time.Duration(slack), hits, len(truth.Spans), earlier)
	if hits < len(truth.Spans)/2 {
		return []string{fmt.Sprintf("ThreadAt answered the span itself for only %d of %d spans", hits, len(truth.Spans))}
	}
	return nil
}

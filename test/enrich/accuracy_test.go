// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package enrich_test checks the whole attribution chain end to end with
// real processes and real BPF: a C publisher (testdata/publishers) whose busy
// threads switch spans every 10 or 50 ms and log the ground truth
// (CLOCK_BOOTTIME and CLOCK_REALTIME), the process_ctx receiver running in
// this process with the eBPF thread sampler, and OTLP profiles built the
// way the OTel eBPF profiler builds them (docs/profiles.md), sent through the
// ctx_enrich processor. The samples' times are those of a profiler: the
// ticks of a second, independent eBPF sampler (its own cpu-clock perf
// events at profilerHz, not the receiver's), which fire only while the
// thread runs. Each sample's link
// must be the span its thread had at the sample's time.
package enrich_test

import (
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/testutil/ebpfwatch"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

func TestMain(m *testing.M) { os.Exit(threadpub.Main(m)) }

// Here the receiver samples at its own ticks (no profiler to follow), so a
// sample is linked only when the catalog saw the same span on both sides
// of it: a sample in span i before the sampler's first tick in span i, or
// after its last, stays unlinked (about 2/(f·L) of the samples of spans of
// length L at frequency f); it is never linked to span i-1. The thresholds
// are asserted at assertHz; the other frequencies are measured and logged.
const assertHz = 4999

var frequencies = []int{assertHz, 997, 97}

// profilerHz is the "profiler's" sampling frequency: high for statistics
// (the OTel eBPF profiler samples far less often; only the times matter
// here), and far from small-integer ratios with the receiver's
// frequencies (997/499 would nearly phase-lock the two samplers' ticks).
const profilerHz = 443

// ownTicksFloor is the share of samples that must be linked right at own
// ticks of hz on spans of ms: a span's edges leave about 2/(hz·L) unlinked
// (see above), and a loaded host delays ticks, so up to three times that
// is allowed (97.6 % for 50 ms at 4999 Hz, 88 % for 10 ms). Wrong links
// have their own bound, 0.1 %, and are never retried.
func ownTicksFloor(hz, ms int) float64 {
	return 1 - 3*2/(float64(hz)*float64(ms)/1000)
}

// minSamples per run below which a figure means little.
const minSamples = 200

// run is one switch run of one worker.
type run struct {
	worker, spans, ms  int
	minAccuracy        float64
	tid                int
	truth              threadpub.SwitchTruth
	times              []int64 // sample times (wall-clock ns), sorted
	bySpanID           map[string]threadpub.Span
	firstSeen          map[string]int64 // span id -> first catalog observation (wall ns)
	matched, ambiguous int
	wrong, unlinked    int
}

// TestEnrichAccuracy: span-switch ground truth → eBPF sampler → catalog →
// ctx_enrich on profiler-shaped samples. Two workers run one after the
// other: 40 spans of 50 ms and 100 spans of 10 ms (of its CPU time), once per sampling
// frequency of the receiver.
func TestEnrichAccuracy(t *testing.T) {
	samplertest.Require(t)
	for _, hz := range frequencies {
		t.Run(fmt.Sprintf("%dHz", hz), func(t *testing.T) {
			// A floor is a rate: a run starved by the host's other work (own
			// ticks or the profiler's late) is measured again. A wrong link
			// fails at once.
			testenv.MeasureFloors(t, func(t *testing.T) []string { return accuracyAt(t, hz) })
		})
	}
}

// accuracyAt measures one frequency; it returns the floors it missed.
func accuracyAt(t *testing.T, samplerHz int) (misses []string) {
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	p.Threads(2)

	// The receiver, in this process, with the eBPF sampler.
	rcvID, cat := ebpfwatch.Start(t, p.PID, samplerHz)
	var err error
	// The catalog keeps its default history bounds: the profiles below are
	// joined after both runs, as a profiler's report arrives seconds after
	// its samples, so the defaults must reach back that far.

	// The workers are tracked once the sampler has seen them busy.
	for k := range 2 {
		waitForRecord(t, p, cat, k, [8]byte{0xee, byte(k)})
	}

	runs := []*run{
		{worker: 0, spans: 40, ms: 50, minAccuracy: ownTicksFloor(assertHz, 50)},
		{worker: 1, spans: 100, ms: 10, minAccuracy: ownTicksFloor(assertHz, 10)},
	}
	// The profiler: its ticks on the workers are the sample times.
	prof := startProfiler(t, p.PID)

	dir := t.TempDir()
	// One run at a time: the busy worker has a CPU to itself while the
	// other CPU serves the sampler's consumer, the test and the rest of the
	// machine. Spans last ms of the worker's CPU time, not of the wall
	// clock: both samplers tick only while the thread runs, so a host that
	// preempts the worker stretches the spans instead of starving the
	// measurement of samples and ticks.
	for _, r := range runs {
		busy := []threadpub.RouteBusy{{Route: "/switch", Busy: time.Duration(r.ms) * time.Millisecond}}
		r.tid = p.SwitchRoutes(r.worker, r.spans, busy, fmt.Sprintf("%s/%d", dir, r.worker))
		p.Wait(r.worker)
		if r.truth, err = threadpub.ReadSwitchTruth(fmt.Sprintf("%s/%d", dir, r.worker)); err != nil {
			t.Fatal(err)
		}
		if len(r.truth.Spans) != r.spans {
			t.Fatalf("worker %d: %d spans in the truth, want %d", r.worker, len(r.truth.Spans), r.spans)
		}
	}
	// Everything the sampler saw of the runs is in the catalog once it
	// shows a record published after them (the sampler delivers in order).
	for _, r := range runs {
		waitForRecord(t, p, cat, r.worker, [8]byte{0xef, byte(r.worker)})
	}

	// The profiler's samples of each worker inside its spans (between two
	// spans the thread is switching, after the last one it parks): boot
	// time to wall clock with the span's own pair of clock reads.
	ticks := prof()
	for _, r := range runs {
		r.bySpanID = map[string]threadpub.Span{}
		r.firstSeen = map[string]int64{}
		for _, s := range r.truth.Spans {
			r.bySpanID[s.SpanID] = s
		}
		for _, tk := range ticks {
			if tk.TID != r.tid {
				continue
			}
			if i, found := spanAtBoot(r.truth, tk.BootNs); found {
				sp := r.truth.Spans[i]
				r.times = append(r.times, sp.RealStart+int64(tk.BootNs-sp.BootStart))
			}
		}
		slices.Sort(r.times)
		if len(r.times) < minSamples {
			return []string{fmt.Sprintf("spans of %d ms: the profiler took only %d samples inside them (%d ticks in all)", r.ms, len(r.times), len(ticks))}
		}
		for _, o := range cat.History(p.PID, r.tid) {
			if o.Record == nil {
				continue
			}
			id := hex.EncodeToString(o.Record.Record.SpanID[:])
			if _, ours := r.bySpanID[id]; !ours {
				continue // a marker record
			}
			if _, seen := r.firstSeen[id]; !seen {
				r.firstSeen[id] = o.First.UnixNano()
			}
		}
	}

	out := enrich(t, rcvID, profilesFor(p.PID, p.Exe, runs))
	score(t, out, p.PID, runs)

	for _, r := range runs {
		n := len(r.times)
		acc := float64(r.matched) / float64(n)
		t.Logf("spans of %d ms (worker %d, %d spans, receiver's sampler %d Hz, profiler %d Hz): %d samples: %d matched (%.2f %%), %d ambiguous (at the sample's time the catalog had not yet observed the span), %d linked to another span, %d unlinked; %d of %d spans observed by the sampler",
			r.ms, r.worker, r.spans, samplerHz, profilerHz, n, r.matched, 100*acc, r.ambiguous, r.wrong, r.unlinked, len(r.firstSeen), r.spans)
		if r.wrong*1000 > n {
			t.Errorf("spans of %d ms at %d Hz: %d of %d samples linked to a wrong span (> 0.1 %%)", r.ms, samplerHz, r.wrong, n)
		}
		if samplerHz == assertHz && acc < r.minAccuracy {
			misses = append(misses, fmt.Sprintf("spans of %d ms: accuracy %.2f %% < %.1f %%", r.ms, 100*acc, 100*r.minAccuracy))
		}
	}
	return misses
}

// startProfiler runs an eBPF sampler of its own on pid at profilerHz;
// stop closes it and returns its samples.
func startProfiler(t *testing.T, pid int) (stop func() []sampler.Sample) {
	t.Helper()
	loc, err := tlsvar.Resolve("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sampler.New(sampler.Options{FrequencyHz: profilerHz})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Track(pid, loc); err != nil {
		_ = s.Close()
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []sampler.Sample
	done := make(chan error, 1)
	go func() {
		done <- s.Run(func(x sampler.Sample) {
			mu.Lock()
			got = append(got, sampler.Sample{PID: x.PID, TID: x.TID, BootNs: x.BootNs})
			mu.Unlock()
		}, nil)
	}()
	var once sync.Once
	stop = func() []sampler.Sample {
		once.Do(func() {
			_ = s.Close()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
		mu.Lock()
		defer mu.Unlock()
		return got
	}
	t.Cleanup(func() { stop() })
	return stop
}

// waitForRecord makes worker k publish a marker record and spin until the
// catalog's latest observation of the worker is that record: a condition
// driven by the worker's own CPU time (the sampler sees a thread only
// while it runs), bounded by a deadline.
func waitForRecord(t *testing.T, p *threadpub.Publisher, cat *catalog.Catalog, k int, span [8]byte) {
	t.Helper()
	tid := p.Set(k, threadpub.Record{TraceID: [16]byte{0xee}, SpanID: span, Flags: 1}).TID
	// The worker must run among the hogs to be sampled: on a starved guest
	// vCPU that takes longer than its time scale, measured at the start, said.
	testenv.EventuallyCPU(t, fmt.Sprintf("worker %d (tid %d): the marker record %x in the catalog", k, tid, span), func() bool {
		p.Do("spin %d 10", k)
		r, _, ok := cat.Thread(p.PID, tid)
		return ok && r.Record.SpanID == span
	})
}

// profilesFor builds what the OTel eBPF profiler sends for one process
// (docs/profiles.md): one ResourceProfiles with process.pid, one profile per
// run (the profiler reports per interval), samples with a thread.id
// attribute (an index into the dictionary's attribute table), one
// timestamp each and no link (LinkIndex 0, the empty link); every
// dictionary table starts with its empty element.
func profilesFor(pid int, exe string, runs []*run) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	dict := pd.Dictionary()
	strs := dict.StringTable()
	str := func(s string) int32 {
		for i, v := range strs.All() {
			if v == s {
				return int32(i)
			}
		}
		strs.Append(s)
		return int32(strs.Len() - 1)
	}
	str("")
	dict.AttributeTable().AppendEmpty()
	dict.LinkTable().AppendEmpty()
	dict.MappingTable().AppendEmpty()
	dict.FunctionTable().AppendEmpty()
	dict.LocationTable().AppendEmpty()
	dict.StackTable().AppendEmpty()
	// One native frame, the same for every sample.
	m := dict.MappingTable().AppendEmpty()
	m.SetFilenameStrindex(str(exe))
	m.SetMemoryStart(0x400000)
	m.SetMemoryLimit(0x500000)
	fn := dict.FunctionTable().AppendEmpty()
	fn.SetNameStrindex(str("do_switch"))
	loc := dict.LocationTable().AppendEmpty()
	loc.SetMappingIndex(1)
	loc.SetAddress(0x401234)
	loc.Lines().AppendEmpty().SetFunctionIndex(1)
	dict.StackTable().AppendEmpty().LocationIndices().Append(1)

	rp := pd.ResourceProfiles().AppendEmpty()
	res := rp.Resource().Attributes()
	res.PutInt("process.pid", int64(pid))
	res.PutStr("process.executable.path", exe)
	res.PutStr("process.executable.name", "threadpub")
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName("go.opentelemetry.io/ebpf-profiler")
	for _, r := range runs {
		prof := sp.Profiles().AppendEmpty()
		prof.SampleType().SetTypeStrindex(str("samples"))
		prof.SampleType().SetUnitStrindex(str("count"))
		prof.PeriodType().SetTypeStrindex(str("cpu"))
		prof.PeriodType().SetUnitStrindex(str("nanoseconds"))
		prof.SetPeriod(int64(time.Second / 20))
		prof.SetTime(pcommon.Timestamp(r.times[0]))
		prof.SetDurationNano(uint64(r.times[len(r.times)-1] - r.times[0]))
		attr := dict.AttributeTable().AppendEmpty()
		attr.SetKeyStrindex(str("thread.id"))
		attr.Value().SetInt(int64(r.tid))
		tidIdx := int32(dict.AttributeTable().Len() - 1)
		name := dict.AttributeTable().AppendEmpty()
		name.SetKeyStrindex(str("thread.name"))
		name.Value().SetStr("threadpub")
		nameIdx := int32(dict.AttributeTable().Len() - 1)
		for _, ts := range r.times {
			s := prof.Samples().AppendEmpty()
			s.SetStackIndex(1)
			s.AttributeIndices().Append(tidIdx, nameIdx)
			s.TimestampsUnixNano().Append(uint64(ts))
		}
	}
	return pd
}

// score classifies every sample of the processed profiles against the
// truth of its thread.
func score(t *testing.T, pd pprofile.Profiles, pid int, runs []*run) {
	t.Helper()
	byTID := map[int64]*run{}
	for _, r := range runs {
		byTID[int64(r.tid)] = r
	}
	dict := pd.Dictionary()
	seen := 0
	for _, rp := range pd.ResourceProfiles().All() {
		if v, ok := rp.Resource().Attributes().Get("process.pid"); !ok || v.Int() != int64(pid) {
			t.Errorf("a ResourceProfiles without process.pid=%d: %v", pid, rp.Resource().Attributes().AsRaw())
			continue
		}
		for _, spr := range rp.ScopeProfiles().All() {
			for _, prof := range spr.Profiles().All() {
				for _, s := range prof.Samples().All() {
					attrs, err := pprofile.FromAttributeIndices(dict.AttributeTable(), s, dict)
					if err != nil {
						t.Fatal(err)
					}
					tid, ok := attrs.Get("thread.id")
					if !ok || s.TimestampsUnixNano().Len() != 1 {
						t.Fatalf("sample lost its thread.id or timestamp: %v", attrs.AsRaw())
					}
					r := byTID[tid.Int()]
					if r == nil {
						t.Fatalf("sample of unknown thread %d", tid.Int())
					}
					seen++
					ts := int64(s.TimestampsUnixNano().At(0))
					want := spanAt(r.truth, ts)
					if first, ok := r.firstSeen[want.SpanID]; !ok || first > ts {
						r.ambiguous++
					}
					if s.LinkIndex() <= 0 {
						r.unlinked++
						continue
					}
					if int(s.LinkIndex()) >= dict.LinkTable().Len() {
						t.Fatalf("link index %d out of the link table (%d)", s.LinkIndex(), dict.LinkTable().Len())
					}
					l := dict.LinkTable().At(int(s.LinkIndex()))
					traceID, spanID := l.TraceID(), l.SpanID()
					if hex.EncodeToString(traceID[:]) == want.TraceID && hex.EncodeToString(spanID[:]) == want.SpanID {
						r.matched++
						continue
					}
					r.wrong++
					if got, ok := r.bySpanID[hex.EncodeToString(spanID[:])]; ok && got.Index > want.Index {
						t.Errorf("thread %d at %d (span %d): linked to the later span %d", r.tid, ts, want.Index, got.Index)
					}
				}
			}
		}
	}
	total := 0
	for _, r := range runs {
		total += len(r.times)
	}
	if seen != total {
		t.Errorf("%d samples came out of the processor, %d went in", seen, total)
	}
}

// spanAt is the span whose [RealStart, RealEnd] holds ts (sample times are
// inside spans).
func spanAt(truth threadpub.SwitchTruth, ts int64) threadpub.Span {
	i, _ := slices.BinarySearchFunc(truth.Spans, ts, func(s threadpub.Span, ts int64) int {
		switch {
		case s.RealEnd < ts:
			return -1
		case s.RealStart > ts:
			return 1
		}
		return 0
	})
	return truth.Spans[min(i, len(truth.Spans)-1)]
}

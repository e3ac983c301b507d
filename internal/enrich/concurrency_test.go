// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// TestMultiTimestampSamples: the profiler aggregates the events of one
// stack and thread into one sample with several timestamps. One whose
// timestamps saw two spans is split into one sample per span when its
// values allow (none, one per timestamp, or one count), else left whole
// (ambiguous); one without a timestamp is left alone.
func TestMultiTimestampSamples(t *testing.T) {
	c := testCatalog(t)
	addCheckout(c, 100, t0)
	observe(t, c, 100, 101, span(100, 101, 0xa, 0x1, t0, nil), t0, t0.Add(999*time.Millisecond))
	observe(t, c, 100, 101, span(100, 101, 0xb, 0x2, t0, nil), t0.Add(time.Second), t0.Add(2*time.Second))
	b := newProfBuilder()
	p := b.Resource(map[string]any{"process.pid": int64(100)})
	ms := func(d int) uint64 { return uint64(t0.Add(time.Duration(d) * time.Millisecond).UnixNano()) }
	// 0: a count of 3 over both spans -> split 2 + 1.
	s := b.Sample(p, t0, b.Thread(101)...)
	s.TimestampsUnixNano().FromRaw([]uint64{ms(100), ms(200), ms(1100)})
	s.Values().FromRaw([]int64{3})
	// 1: one value per timestamp -> split with its values.
	s = b.Sample(p, t0, b.Thread(101)...)
	s.TimestampsUnixNano().FromRaw([]uint64{ms(300), ms(1200)})
	s.Values().FromRaw([]int64{10, 20})
	// 2: one value of another meaning -> left whole.
	s = b.Sample(p, t0, b.Thread(101)...)
	s.TimestampsUnixNano().FromRaw([]uint64{ms(400), ms(1300)})
	s.Values().FromRaw([]int64{7})
	// 3: both timestamps in one span -> one link.
	s = b.Sample(p, t0, b.Thread(101)...)
	s.TimestampsUnixNano().FromRaw([]uint64{ms(100), ms(900)})
	s.Values().FromRaw([]int64{2})
	// 4: no timestamp.
	b.Sample(p, t0, b.Thread(101)...).TimestampsUnixNano().FromRaw(nil)

	h := newHarness(t, c, testPolicy())
	out := h.run(b.PD)
	samples := out.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples()
	if samples.Len() != 7 {
		t.Fatalf("%d samples, want 7 (5 + 2 split off)", samples.Len())
	}
	type want struct {
		ts   int
		vals []int64
		span byte // 0: no link
	}
	for i, w := range []want{
		{2, []int64{2}, 0x1}, {1, []int64{10}, 0x1}, {2, []int64{7}, 0}, {2, []int64{2}, 0x1}, {0, []int64{1}, 0},
		{1, []int64{1}, 0x2}, {1, []int64{20}, 0x2}, // split off, appended in order
	} {
		s := samples.At(i)
		_, sp := sampleLink(out, s)
		if s.TimestampsUnixNano().Len() != w.ts || !slices.Equal(s.Values().AsRaw(), w.vals) || sp[0] != w.span {
			t.Errorf("sample %d: %d timestamps, values %v, span %x; want %+v", i, s.TimestampsUnixNano().Len(), s.Values().AsRaw(), sp[0], w)
		}
	}
	for r, want := range map[string]int64{"ambiguous": 1, "no_timestamp": 1} {
		if n := h.unmatched(r); n != want {
			t.Errorf("%s: %d", r, n)
		}
	}
	if n := h.cnt.SamplesSplit; n != 2 {
		t.Errorf("split %d", n)
	}
	checkGolden(t, "multi_timestamp", out)
}

// TestConcurrentConsumers: messages processed at once (pooled batch
// state) while the receiver keeps writing the catalog; run with -race.
func TestConcurrentConsumers(t *testing.T) {
	c := testCatalog(t)
	addCheckout(c, 100, t0)
	observe(t, c, 100, 101, span(100, 101, 0xa, 0x1, t0, map[string]string{"k": "v"}), t0)
	proc, _ := c.Process(100)
	var wg sync.WaitGroup
	wg.Go(func() { // the watcher: new spans on thread 101
		for i := range 200 {
			c.ObserveFor(proc.ID, 101, t0.Add(time.Duration(i+1)*time.Millisecond), span(100, 101, byte(i%250+1), 0x1, t0, map[string]string{"k": "v"}), false)
		}
	})
	for w := range 4 {
		wg.Go(func() {
			for range 50 {
				b := newProfBuilder()
				prof := b.Resource(map[string]any{"process.pid": int64(100)})
				for i := range 20 {
					b.Sample(prof, t0.Add(time.Duration(i*10+w)*time.Millisecond), b.Thread(101)...)
				}
				orig := pprofile.NewProfiles()
				b.PD.CopyTo(orig)
				Profiles(c, testPolicy(), b.PD)
				for _, err := range validationErrors(orig, b.PD) {
					t.Error(err)
				}
				// Whether a sample finds its record depends on how far the
				// writer got (and the history depth); a link it gets must
				// be one of the writer's spans.
				for _, s := range b.PD.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().All() {
					if l := b.PD.Dictionary().LinkTable().At(int(s.LinkIndex())); s.LinkIndex() > 0 && l.SpanID()[0] != 1 {
						t.Errorf("foreign link %v", l.SpanID())
					}
				}
			}
		})
	}
	wg.Wait()
}

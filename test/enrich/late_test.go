// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich_test

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/testutil/ebpfwatch"
	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// lateAttach is the stand-in profiler's start-up: its program loaded, no
// perf event open yet. The OTel eBPF profiler loads native_tracer_entry
// seconds before it opens its perf events; a program silent for 3 s used
// to be let go.
const lateAttach = 5 * time.Second

// TestEnrichFollowingLateAttach: the receiver (thread sampling auto)
// follows a stand-in profiler that loads its program, waits 5 s, then
// samples at 997 Hz while a worker switches 10 ms spans on a busy host:
// its samples are linked right from its very first one, and never wrong.
// Then the profiler is stopped and started again (a new program ID): the
// same from its new first sample. A starved run (too few samples, or
// fewer right) is measured again; a wrong link fails at once.
func TestEnrichFollowingLateAttach(t *testing.T) {
	samplertest.Require(t)
	testenv.MeasureFloors(t, lateAttachRun)
}

func lateAttachRun(t *testing.T) (misses []string) {
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	p.Threads(1)
	startHogs(t, hogsPerCore*runtime.NumCPU())
	const name = "otelctx_test_la" // 15 bytes: the kernel keeps it whole
	rcvID, cat := ebpfwatch.StartWith(t, p.PID, func(cfg *processctxextension.Config) {
		cfg.ThreadContext.FollowPrograms = []string{name}
	})
	waitForRecord(t, p, cat, 0, [8]byte{0xee})
	dir := t.TempDir()
	for round, what := range []string{"start", "restart"} {
		prof, err := fakeprof.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = prof.Close() })
		time.Sleep(lateAttach) // the stand-in's start-up, not a synchronisation
		path := fmt.Sprintf("%s/%d", dir, round)
		all := &run{worker: 0, spans: 300, ms: 10}
		all.tid = p.Switch(0, all.spans, all.ms, path)
		if err := prof.Attach(fakeprof.CPUClock, 997); err != nil {
			t.Fatal(err)
		}
		p.Wait(0)
		if all.truth, err = threadpub.ReadSwitchTruth(path); err != nil {
			t.Fatal(err)
		}
		waitForRecord(t, p, cat, 0, [8]byte{0xef, byte(round)})
		if err := prof.Stop(); err != nil {
			t.Fatal(err)
		}
		for _, s := range prof.Samples() {
			if _, in := spanAtBoot(all.truth, s.BootNs); in && s.TID == all.tid {
				all.times = append(all.times, prof.WallTime(s.BootNs).UnixNano())
			}
		}
		slices.Sort(all.times)
		// The first second of samples, and the rest, scored apart.
		cut := 0
		if len(all.times) > 0 {
			cut, _ = slices.BinarySearch(all.times, all.times[0]+int64(time.Second))
		}
		if len(all.times) < minSamples || cut == len(all.times) {
			misses = append(misses, fmt.Sprintf("%s: the profiler took only %d samples inside the spans, %d after the first second", what, len(all.times), len(all.times)-cut))
			if err := prof.Close(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		first, rest := *all, *all
		first.times, rest.times = all.times[:cut], all.times[cut:]
		for _, r := range []*run{&first, &rest} {
			r.bySpanID, r.firstSeen = map[string]threadpub.Span{}, map[string]int64{}
			for _, s := range r.truth.Spans {
				r.bySpanID[s.SpanID] = s
				r.firstSeen[s.SpanID] = 0 // the ambiguity measure of score does not apply here
			}
			score(t, enrich(t, rcvID, profilesFor(p.PID, p.Exe, []*run{r})), p.PID, []*run{r})
		}
		for _, part := range []struct {
			name string
			r    *run
		}{{"first second", &first}, {"the rest", &rest}} {
			r := part.r
			n := len(r.times)
			right := float64(r.matched) / float64(n)
			t.Logf("%s (program %d, 997 Hz, %d hogs), %s: %d samples: %d right (%.2f %%), %d wrong, %d unlinked",
				what, prof.ID(), hogsPerCore*runtime.NumCPU(), part.name, n, r.matched, 100*right, r.wrong, r.unlinked)
			if r.wrong > 0 {
				t.Errorf("%s, %s: %d of %d samples linked to a wrong span", what, part.name, r.wrong, n)
			}
			if right < 0.99 {
				misses = append(misses, fmt.Sprintf("%s, %s: %.2f %% right < 99 %%", what, part.name, 100*right))
			}
		}
		if err := prof.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return misses
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// lateAttach: how long the stand-in profiler runs with its program loaded
// and no perf event open (the OTel eBPF profiler loads native_tracer_entry
// seconds before it attaches), longer than the 3 s after which a silent
// program used to be let go.
const lateAttach = 4 * time.Second

// A profiler that loads its program first and opens its perf events later
// is followed from its load: own ticks run until its first sample, and
// every one of its runs on a tracked thread has its followed capture, the
// very first included. Then the same after a restart (a new program ID).
func TestFollowLateAttach(t *testing.T) {
	testenv.RequireRoot(t)
	const name = "fake_late_prof"
	log := newStatusLog()
	s, c, _ := startFollowing(t, name, 10*time.Millisecond, log)
	p, truth := trackedWorker(t, s)
	var old uint32
	for round := range 2 {
		prof, err := fakeprof.Load(name)
		if err != nil {
			testenv.Missing(t, "fake profiler: "+err.Error())
		}
		t.Cleanup(func() { _ = prof.Close() })
		if uint32(prof.ID()) == old {
			t.Fatalf("restarted profiler has the same ID %d", old)
		}
		old = uint32(prof.ID())
		waiting := func(st FollowStatus) bool {
			return follows(st, prof.ID()) && !st.Programs[0].Sampled && st.OwnTicks && st.Err == nil
		}
		log.wait(t, statusWait, "loaded program followed, no sample yet, own ticks open", waiting)
		time.Sleep(lateAttach) // the stand-in's start-up, not a synchronisation
		if st := s.FollowStatus(); !waiting(st) {
			t.Fatalf("round %d: status %+v after %v without perf events: want the program still followed, own ticks open, no error", round, st, lateAttach)
		}
		from := bootNow(t)
		if err := prof.Attach(fakeprof.CPUClock, 97); err != nil {
			t.Fatal(err)
		}
		// The worker runs until the profiler sampled it a few times (on a
		// busy host it may get little of a CPU).
		for deadline := time.Now().Add(time.Minute); ; {
			p.Do("spin 0 500")
			n := 0
			for _, r := range prof.Samples() {
				if r.TID == truth.TID {
					n++
				}
			}
			if n >= 20 || time.Now().After(deadline) {
				break
			}
		}
		to := bootNow(t)
		if err := prof.Stop(); err != nil {
			t.Fatal(err)
		}
		n := checkFollowed(t, prof.Samples(), c, truth.TID, from, to)
		log.wait(t, statusWait, "first sample seen, own ticks closed", func(st FollowStatus) bool {
			return follows(st, prof.ID()) && st.Programs[0].Sampled && !st.OwnTicks && st.Err == nil
		})
		t.Logf("round %d (program %d): all %d runs on the worker followed, from the first", round, prof.ID(), n)
		if err := prof.Close(); err != nil {
			t.Fatal(err)
		}
		log.wait(t, statusWait, "program unloaded: not followed, own ticks back", func(st FollowStatus) bool {
			return len(st.Programs) == 0 && st.OwnTicks
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// followBenchEnv names a perf_event program already running (a real
// profiler's, e.g. native_tracer_entry) to follow instead of the fake
// profiler in the hit phase.
const followBenchEnv = "OTELCTX_BENCH_FOLLOW"

// BenchmarkFollowCost is the kernel's accounting (BPF run-time
// statistics) of following through the sampling timer, per b.N seconds:
//
//   - miss-ns: on_profiler_timer's run time per timer expiry that is not a
//     followed sample (measured while the followed program is loaded but
//     its perf events are closed: every expiry is a miss; with
//     OTELCTX_BENCH_FOLLOW, by a sampler that follows only the stand-in, so
//     the running program's expiries are misses too, one ID lookup dearer);
//
//   - hit-ns: per followed sample (the misses' share taken out), with the
//     sampled thread tracked (tracked: a worker of a publisher spins) or
//     not (untracked);
//
//   - prof-ns: the followed program's own run time per run, and the two
//     ratios hit/prof and miss/prof.
//
//     go test -run '^$' -bench FollowCost -benchtime 5x ./internal/threads/sampler
func BenchmarkFollowCost(b *testing.B) {
	testenv.RequireRoot(b)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		testenv.Missing(b, "BPF_ENABLE_STATS: "+err.Error())
	}
	defer stats.Close()
	b.Run("untracked", func(b *testing.B) { followCost(b, false) })
	b.Run("tracked", func(b *testing.B) { followCost(b, true) })
}

func followCost(b *testing.B, tracked bool) {
	name := os.Getenv(followBenchEnv)
	external := name != ""
	if !external {
		name = fakeprof.DefaultName
	}
	work := func() { time.Sleep(time.Second) }
	var track func(*Sampler)
	if tracked {
		p := threadpub.Start(b, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
		p.Threads(1)
		p.Set(0, record(3))
		loc, err := tlsvar.Resolve("/proc", p.PID)
		if err != nil {
			b.Fatal(err)
		}
		track = func(s *Sampler) {
			if err := s.Track(p.PID, loc); err != nil {
				b.Fatal(err)
			}
		}
		work = func() { p.Do("spin 0 1000") }
	}
	open := func(programs ...string) *Sampler {
		s, err := New(Options{Follow: FollowOptions{Programs: programs, OwnTicks: OwnTicksNever, Rescan: 50 * time.Millisecond}})
		if err != nil {
			testenv.Missing(b, err.Error())
		}
		go func() { _ = s.Run(nil, nil) }() // drain the ring buffer
		if s.FollowStatus().Method != MethodHrtimer {
			s.Close()
			testenv.Missing(b, fmt.Sprintf("the hrtimer method of following (this kernel: %+v)", s.FollowStatus()))
		}
		if track != nil {
			track(s)
		}
		return s
	}
	var missNs float64
	if external {
		// A running program that is followed would make its own expiries
		// hits in the miss phase: misses are measured by a sampler that
		// follows only the stand-in (the program's expiries are then
		// misses that also look up its ID).
		ms := open(fakeprof.DefaultName)
		missNs = missCost(b, ms, work)
		ms.Close()
	}
	s := open(name, fakeprof.DefaultName)
	defer s.Close()
	if !external {
		missNs = missCost(b, s, work)
	}
	var prof *ebpf.Program
	if external {
		prof = followedProgram(b, s, name)
	} else {
		// At 997 Hz hits are about as many as misses: the misses' share,
		// estimated from another second, weighs little on hit-ns.
		fp, err := fakeprof.Start(997, name)
		if err != nil {
			b.Fatal(err)
		}
		defer fp.Close()
		waitFollowed(b, s, fp.ID())
		if prof, err = ebpf.NewProgramFromID(fp.ID()); err != nil {
			b.Fatal(err)
		}
	}
	defer prof.Close()
	timer := s.follow.timer
	var runtime, profRuntime time.Duration
	var runs, hits, captures, profRuns uint64
	for b.Loop() {
		t0, _ := timer.Stats()
		p0, _ := prof.Stats()
		s0, _ := s.Stats()
		work()
		t1, _ := timer.Stats()
		p1, _ := prof.Stats()
		s1, _ := s.Stats()
		runtime += t1.Runtime - t0.Runtime
		runs += t1.RunCount - t0.RunCount
		hits += s1.ProfilerSamples - s0.ProfilerSamples
		captures += s1.Followed - s0.Followed
		profRuntime += p1.Runtime - p0.Runtime
		profRuns += p1.RunCount - p0.RunCount
	}
	if hits == 0 || profRuns == 0 {
		b.Fatalf("no followed sample (%d timer runs, %d profiler runs)", runs, profRuns)
	}
	hitNs := (float64(runtime.Nanoseconds()) - float64(runs-hits)*missNs) / float64(hits)
	profNs := float64(profRuntime.Nanoseconds()) / float64(profRuns)
	b.ReportMetric(missNs, "miss-ns")
	b.ReportMetric(hitNs, "hit-ns")
	b.ReportMetric(profNs, "prof-ns")
	b.ReportMetric(hitNs/profNs, "hit/prof")
	b.ReportMetric(missNs/profNs, "miss/prof")
	b.ReportMetric(float64(captures)/float64(hits), "tracked-ratio")
	b.ReportMetric(float64(runs-hits)/float64(hits), "misses/hit")
}

// missCost: on_profiler_timer's run time per expiry while a followed
// program exists but does not sample (a stopped fake profiler), over one
// run of work (the load of the hit phase: expiries depend on it).
func missCost(b *testing.B, s *Sampler, work func()) float64 {
	b.Helper()
	fp, err := fakeprof.Start(97, fakeprof.DefaultName)
	if err != nil {
		b.Fatal(err)
	}
	defer fp.Close()
	waitFollowed(b, s, fp.ID())
	if err := fp.Stop(); err != nil {
		b.Fatal(err)
	}
	t0, _ := s.follow.timer.Stats()
	work()
	work()
	t1, _ := s.follow.timer.Stats()
	if t1.RunCount == t0.RunCount {
		b.Fatal("no timer expiry")
	}
	return float64((t1.Runtime - t0.Runtime).Nanoseconds()) / float64(t1.RunCount-t0.RunCount)
}

func waitFollowed(b *testing.B, s *Sampler, id ebpf.ProgramID) {
	b.Helper()
	testenv.EventuallyWithin(b, 5*time.Second, fmt.Sprintf("program %d followed", id), func() bool {
		return follows(s.FollowStatus(), id)
	})
}

// followedProgram opens the followed program named name.
func followedProgram(b *testing.B, s *Sampler, name string) *ebpf.Program {
	b.Helper()
	var id uint32
	testenv.EventuallyWithin(b, 5*time.Second, name+" followed", func() bool {
		for _, fp := range s.FollowStatus().Programs {
			if fp.Name == name {
				id = fp.ID
				return true
			}
		}
		return false
	})
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		b.Fatal(err)
	}
	return p
}

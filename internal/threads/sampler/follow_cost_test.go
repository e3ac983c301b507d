// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// BenchmarkFollowMethodCost measures, where both methods work (test/vm's
// guests run it), what following costs per followed capture in BPF run
// time (the kernel's BPF_ENABLE_STATS counters): fentry runs once per
// profiler sample; the hrtimer program runs at every hrtimer expiry of the
// system and filters. Each op is 2 s of a tracked thread spinning under a
// 997 Hz profiler; the metrics: BPF ns and program runs per followed
// capture (the emulated CPU's times are not a machine's: compare methods,
// not machines).
func BenchmarkFollowMethodCost(b *testing.B) {
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		testenv.Missing(b, "BPF run-time statistics: "+err.Error())
	}
	defer stats.Close()
	for _, m := range []struct{ method, prog string }{{MethodFentry, "on_profiler_ent"}, {MethodHrtimer, "on_profiler_tim"}} {
		b.Run(m.method, func(b *testing.B) {
			if m.method == MethodHrtimer {
				hrtimerOnly(b)
			}
			prof := startProfiler(b, 997, fakeprof.DefaultName)
			defer prof.Close()
			s, _ := startSampler(b, Options{Follow: FollowOptions{Programs: []string{fakeprof.DefaultName}, OwnTicks: OwnTicksNever}})
			if st := s.FollowStatus(); len(st.Programs) != 1 || st.Programs[0].Method != m.method {
				if st.Programs != nil && m.method == MethodFentry && st.Programs[0].NoFentry != "" {
					testenv.Missing(b, "fentry on the profiler's program: "+st.Programs[0].NoFentry+" (test/vm's guests allow it)")
				}
				b.Fatalf("status %+v: want the profiler followed by %s", st, m.method)
			}
			p, _ := trackedWorker(b, s)
			prog := newestProgram(b, m.prog)
			defer prog.Close()
			before, err := prog.Stats()
			if err != nil {
				b.Fatal(err)
			}
			st0, _ := s.Stats()
			b.ResetTimer()
			for range b.N {
				p.Do("spin 0 %d", 2000)
			}
			b.StopTimer()
			after, err := prog.Stats()
			if err != nil {
				b.Fatal(err)
			}
			st1, _ := s.Stats()
			runs, rt := after.RunCount-before.RunCount, after.Runtime-before.Runtime
			followed := st1.Followed - st0.Followed
			if followed == 0 || runs == 0 {
				b.Fatalf("%d followed captures, %d runs of %s", followed, runs, m.prog)
			}
			b.ReportMetric(float64(rt.Nanoseconds())/float64(followed), "bpf-ns/capture")
			b.ReportMetric(float64(runs)/float64(followed), "runs/capture")
			b.Logf("%s: %d runs of %s, %v in BPF (%v a run), %d followed captures, %d profiler samples",
				m.method, runs, m.prog, rt, rt/time.Duration(runs), followed, st1.ProfilerSamples-st0.ProfilerSamples)
		})
	}
}

// newestProgram opens the loaded program with the highest ID whose kernel
// name is name (15 bytes).
func newestProgram(t testing.TB, name string) *ebpf.Program {
	t.Helper()
	var best *ebpf.Program
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		if info, err := p.Info(); err == nil && strings.HasPrefix(info.Name, name) {
			if best != nil {
				best.Close()
			}
			best = p
			continue
		}
		p.Close()
	}
	if best == nil {
		t.Fatalf("no loaded program named %s", name)
	}
	return best
}

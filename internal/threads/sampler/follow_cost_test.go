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
)

// TestFollowCost measures, where both methods work (test/vm's guests), what
// following costs per followed capture in BPF run time (the kernel's
// BPF_ENABLE_STATS counters): fentry runs once per profiler sample; the
// hrtimer program runs at every hrtimer expiry of the system and filters.
// A figure for the log (the emulated CPU's times are not a machine's).
func TestFollowCost(t *testing.T) {
	if os.Getenv("OTELCTX_VM_GUEST") == "" {
		t.Skip("a figure for test/vm's guests, where the kernel allows both methods")
	}
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	for _, m := range []struct{ method, prog string }{{MethodFentry, "on_profiler_ent"}, {MethodHrtimer, "on_profiler_tim"}} {
		t.Run(m.method, func(t *testing.T) {
			if m.method == MethodHrtimer {
				hrtimerOnly(t)
			}
			prof := startProfiler(t, 997, fakeprof.DefaultName)
			defer prof.Close()
			s, _ := startSampler(t, Options{Follow: FollowOptions{Programs: []string{fakeprof.DefaultName}, OwnTicks: OwnTicksNever}})
			if st := s.FollowStatus(); len(st.Programs) != 1 || st.Programs[0].Method != m.method {
				t.Fatalf("status %+v: want the profiler followed by %s", st, m.method)
			}
			p, _ := trackedWorker(t, s)
			prog := newestProgram(t, m.prog)
			defer prog.Close()
			before, err := prog.Stats()
			if err != nil {
				t.Fatal(err)
			}
			st0, _ := s.Stats()
			p.Do("spin 0 %d", 2000)
			after, err := prog.Stats()
			if err != nil {
				t.Fatal(err)
			}
			st1, _ := s.Stats()
			runs, rt := after.RunCount-before.RunCount, after.Runtime-before.Runtime
			followed := st1.Followed - st0.Followed
			if followed == 0 || runs == 0 {
				t.Fatalf("%d followed captures, %d runs of %s", followed, runs, m.prog)
			}
			t.Logf("%s: %d runs of %s, %v in BPF (%v a run), %d followed captures, %d profiler samples: %v per followed capture",
				m.method, runs, m.prog, rt, rt/time.Duration(runs), followed, st1.ProfilerSamples-st0.ProfilerSamples, rt/time.Duration(followed))
		})
	}
}

// newestProgram opens the loaded program with the highest ID whose kernel
// name is name (15 bytes).
func newestProgram(t *testing.T, name string) *ebpf.Program {
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

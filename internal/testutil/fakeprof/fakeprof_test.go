// SPDX-License-Identifier: Apache-2.0

//go:build linux

package fakeprof

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/internal/proc/cpulist"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LongLived...) }

func start(t *testing.T, hz int, name string) *Profiler {
	t.Helper()
	testenv.RequireRoot(t)
	p, err := Start(hz, name)
	if err != nil {
		testenv.Missing(t, "fakeprof: "+err.Error())
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Every CPU samples at about hz, each run recording the task it found.
func TestSamplesEveryCPU(t *testing.T) {
	// Not DefaultName: the sampler's tests, which may run meanwhile, follow it.
	const name = "fakeprof_every"
	p := start(t, 100, name)
	info, err := ebpf.NewProgramFromID(p.ID())
	if err != nil {
		t.Fatalf("program %d: %v", p.ID(), err)
	}
	pi, err := info.Info()
	info.Close()
	if err != nil || pi.Name != name || pi.Type != ebpf.PerfEvent {
		t.Fatalf("program info %+v, %v: want a perf_event program named %s", pi, err, name)
	}
	// Keep this thread on CPU for a while: some runs must find it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	got := p.Samples()
	cpus, _ := cpulist.Online()
	if n := len(got); n < 50*len(cpus) || n > 200*len(cpus) {
		t.Errorf("%d runs in 1 s at 100 Hz on %d CPUs", n, len(cpus))
	}
	self := 0
	for _, s := range got {
		if s.PID == os.Getpid() {
			self++
		}
		if d := time.Since(s.Time); d < 0 || d > 10*time.Second {
			t.Errorf("run at %v, %v ago", s.Time, d)
		}
	}
	if self == 0 {
		t.Errorf("no run found this busy process among %d", len(got))
	}
	t.Logf("%d runs, %d on this process", len(got), self)
}

// Close unloads: the program ID disappears.
func TestCloseUnloads(t *testing.T) {
	p := start(t, 20, "fake_profiler_long_name")
	id := p.ID()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ebpf.NewProgramFromID(id); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("program %d after Close: %v, want ErrNotExist", id, err)
	}
}

// waitRuns waits (testenv.Eventually) until the profiler recorded more
// than n runs, and returns how many.
func waitRuns(t *testing.T, p *Profiler, n int) int {
	t.Helper()
	got := 0
	testenv.Eventually(t, fmt.Sprintf("a run after %d", n), func() bool {
		got = len(p.Samples())
		return got > n
	})
	return got
}

// pauseWindow: how long the profiler stays paused in TestPauseResume (the
// span checked for runs, a few periods at 97 Hz).
const pauseWindow = 300 * time.Millisecond

// A paused profiler does not run; resumed, it runs again. The first run
// after Resume is the marker: the ring buffer delivers runs in order, so
// by then every run of the pause would have been read.
func TestPauseResume(t *testing.T) {
	p := start(t, 97, "fakeprof_pause")
	waitRuns(t, p, 0)
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()  // Pause waited for the runs in flight
	time.Sleep(pauseWindow) // the span under test, not a synchronisation
	resumedAt := time.Now()
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	n := waitRuns(t, p, len(p.Samples()))
	var during int
	for _, s := range p.Samples()[:n] {
		// A millisecond's margin for the boot-to-wall clock offset.
		if s.Time.After(pausedAt.Add(time.Millisecond)) && s.Time.Before(resumedAt.Add(-time.Millisecond)) {
			during++
		}
	}
	if during > 0 {
		t.Errorf("%d runs while paused (%v)", during, resumedAt.Sub(pausedAt))
	}
}

// On context-switch events the program runs at context switches (no
// hrtimer): sleeping threads switch out all the time.
func TestStartOnContextSwitches(t *testing.T) {
	testenv.RequireRoot(t)
	p, err := StartOn(ContextSwitches, 97, "fake_cs")
	if err != nil {
		testenv.Missing(t, "fakeprof: "+err.Error())
	}
	t.Cleanup(func() { _ = p.Close() })
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	n := waitRuns(t, p, 0)
	t.Logf("%d runs at context switches", n)
}

// Load alone: the program is listed and never runs (no perf event); it
// runs from Attach on; a second Attach is refused.
func TestLoadThenAttach(t *testing.T) {
	testenv.RequireRoot(t)
	p, err := Load("fake_late")
	if err != nil {
		testenv.Missing(t, "fakeprof: "+err.Error())
	}
	t.Cleanup(func() { _ = p.Close() })
	prog, err := ebpf.NewProgramFromID(p.ID())
	if err != nil {
		t.Fatalf("program %d not listed after Load: %v", p.ID(), err)
	}
	prog.Close()
	// No name: DefaultName (loaded without perf events, so a sampler test
	// following it meanwhile sees no sample of it).
	def, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := def.prog.Info(); err != nil || info.Name != DefaultName {
		t.Errorf("Load(\"\"): program info %+v, %v: want the name %s", info, err, DefaultName)
	}
	if err := def.Close(); err != nil {
		t.Fatal(err)
	}
	// Flushing the ring buffer (Stop) returns once every run so far is in Samples.
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := len(p.Samples()); n != 0 {
		t.Errorf("%d runs before Attach", n)
	}
	if err := p.Attach(CPUClock, 97); err == nil {
		t.Errorf("Attach after Stop succeeded")
	}

	q, err := Load("fake_late")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	if err := q.Attach(CPUClock, 97); err != nil {
		t.Fatal(err)
	}
	if err := q.Attach(CPUClock, 97); err == nil {
		t.Errorf("second Attach succeeded")
	}
	waitRuns(t, q, 0)
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// shortTimings shortens the watcher's fentry quiet time for the samplers
// the test creates afterwards (New copies it), restored when the test ends.
func shortTimings(t *testing.T, quiet time.Duration) {
	t.Helper()
	q := followQuiet
	followQuiet = quiet
	t.Cleanup(func() { followQuiet = q })
}

// copyTestBinary copies this test binary where any user may run it (the
// build directory is private to root).
func copyTestBinary(t *testing.T) (dir, exe string) {
	t.Helper()
	dir = t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // TempDir makes both 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe = filepath.Join(dir, "sampler.test")
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, exe
}

// noSysAdminEnv: set (to the fake profiler's program ID) in the child of
// TestFollowWithoutSysAdmin, which runs without CAP_SYS_ADMIN.
const noSysAdminEnv = "OTELCTX_SAMPLER_TEST_NO_SYS_ADMIN"

// Without CAP_SYS_ADMIN the kernel does not list BPF programs, so nothing
// can be followed; with CAP_BPF + CAP_PERFMON own ticks still work: New
// succeeds unless OwnTicksNever, own ticks are open, and the status says
// why following is off. The test re-runs itself as uid 65534 with CAP_BPF,
// CAP_PERFMON and CAP_SYSLOG (kallsyms addresses, so that a follow method
// loads and listing is the only thing missing) as ambient capabilities.
func TestFollowWithoutSysAdmin(t *testing.T) {
	if v := os.Getenv(noSysAdminEnv); v != "" {
		followWithoutSysAdmin(t, v)
		return
	}
	prof := startProfiler(t, 97, fakeprof.DefaultName)
	dir, exe := copyTestBinary(t)
	cmd := exec.Command(exe, "-test.run=^TestFollowWithoutSysAdmin$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), noSysAdminEnv+"="+strconv.Itoa(int(prof.ID())))
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: 65534, Gid: 65534},
		AmbientCaps: []uintptr{unix.CAP_BPF, unix.CAP_PERFMON, unix.CAP_SYSLOG},
	}
	out, err := cmd.CombinedOutput()
	t.Logf("child as uid 65534 with CAP_BPF, CAP_PERFMON, CAP_SYSLOG:\n%s", out)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		testenv.Missing(t, "cannot start a child with ambient capabilities: "+err.Error())
	}
	switch {
	case strings.Contains(string(out), "--- SKIP: TestFollowWithoutSysAdmin"):
		testenv.Missing(t, "the child skipped (see its output)")
	case err != nil || !strings.Contains(string(out), "--- PASS: TestFollowWithoutSysAdmin"):
		t.Fatalf("child failed: %v", err)
	}
}

// followWithoutSysAdmin is the child's part.
func followWithoutSysAdmin(t *testing.T, profID string) {
	if _, err := ebpf.ProgramGetNextID(0); !errors.Is(err, unix.EPERM) {
		t.Fatalf("listing BPF programs without CAP_SYS_ADMIN: %v, want EPERM", err)
	}
	// What the kernel allows with these capabilities: own ticks.
	s, err := New(Options{})
	if err != nil {
		testenv.Missing(t, "own ticks with CAP_BPF + CAP_PERFMON: "+err.Error())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for _, own := range []OwnTicks{OwnTicksUnlessFollowing, OwnTicksAlways} {
		log := newStatusLog()
		s, err := New(Options{Follow: FollowOptions{Programs: []string{fakeprof.DefaultName}, OwnTicks: own, OnChange: log.onChange}})
		if err != nil {
			t.Fatalf("%v: New: %v; want a sampler on own ticks", own, err)
		}
		st := s.FollowStatus()
		t.Logf("%v: status %+v", own, st)
		if !st.OwnTicks || !s.ticks.isOpen() {
			t.Errorf("%v: own ticks not open", own)
		}
		if len(st.Programs) != 0 || st.Method != "" {
			t.Errorf("%v: status %+v: nothing can be followed (program %s runs, but cannot be listed)", own, st, profID)
		}
		if st.Err == nil || !strings.Contains(st.Err.Error(), "listing BPF programs needs CAP_SYS_ADMIN: following is off") {
			t.Errorf("%v: status error %v: want it to say that listing needs CAP_SYS_ADMIN", own, st.Err)
		}
		log.mu.Lock()
		if len(log.all) != 1 || errString(log.all[0].Err) != errString(st.Err) {
			t.Errorf("%v: OnChange got %+v, want the status once", own, log.all)
		}
		log.mu.Unlock()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}

	_, err = New(Options{Follow: FollowOptions{Programs: []string{fakeprof.DefaultName}, OwnTicks: OwnTicksNever}})
	t.Logf("OwnTicksNever: %v", err)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "CAP_SYS_ADMIN") {
		t.Errorf("OwnTicksNever: New: %v; want ErrUnavailable saying that listing needs CAP_SYS_ADMIN", err)
	}
}

// A failure in New after following started (here: a ring buffer reader)
// leaves nothing behind: no watcher goroutine, no timer link or program.
func TestNewFailureReleasesFollowing(t *testing.T) {
	prof := startProfiler(t, 97, fakeprof.DefaultName)
	opts := Options{Follow: FollowOptions{Programs: []string{fakeprof.DefaultName}, OwnTicks: OwnTicksUnlessFollowing}}
	s := newSampler(t, opts)
	st := s.FollowStatus()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st.Method == "" || !follows(st, prof.ID()) {
		testenv.Missing(t, fmt.Sprintf("not following: %+v", st))
	}
	base := fdSnapshot(t)
	ignore := goleak.IgnoreCurrent()
	calls := 0
	injected := errors.New("injected reader failure")
	newRingReader = func(m *ebpf.Map) (*ringbuf.Reader, error) {
		if calls++; calls == 2 {
			return nil, injected
		}
		return ringbuf.NewReader(m)
	}
	defer func() { newRingReader = ringbuf.NewReader }()
	s, err := New(opts)
	if err == nil {
		s.Close()
		t.Fatal("New succeeded with a failing ring buffer reader")
	}
	if !errors.Is(err, injected) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("New: %v", err)
	}
	goleak.VerifyNone(t, append(testenv.LongLived, ignore)...)
	checkNoNewFDs(t, base, "after the failed New")
}

// A followed program whose samples the method cannot see (here the
// profiler samples at context switches: no hrtimer) stays followed as
// long as it is loaded, without a sample and without an error, and own
// ticks keep running meanwhile: the tracked worker is still sampled by
// them. With fentry (which sees any event) its samples are followed.
func TestFollowUnseenEventsKeepsOwnTicks(t *testing.T) {
	testenv.RequireRoot(t)
	const name = "fake_cs_prof"
	prof, err := fakeprof.StartOn(fakeprof.ContextSwitches, 97, name)
	if err != nil {
		testenv.Missing(t, "fake profiler: "+err.Error())
	}
	t.Cleanup(func() { _ = prof.Close() })
	// On a guest the host barely schedules, 2 s may pass without a
	// context-switch sample: the quiet rule would move the program to the
	// hrtimer method, which cannot see these events.
	shortTimings(t, statusWait)
	log := newStatusLog()
	s, c, st := startFollowing(t, name, 10*time.Millisecond, log)
	if !follows(st, prof.ID()) || !st.OwnTicks || st.Err != nil || st.Programs[0].Sampled {
		t.Fatalf("status %+v: want program %d followed, not sampled yet, own ticks open, no error", st, prof.ID())
	}
	if st.Programs[0].Method == MethodFentry {
		switchContexts(t)
		log.wait(t, statusWait, "fentry: samples followed, own ticks closed", func(st FollowStatus) bool {
			return follows(st, prof.ID()) && st.Programs[0].Sampled && !st.OwnTicks
		})
		return
	}
	p, truth := trackedWorker(t, s)
	// The profiler runs for hundreds of scans (10 ms apart): the sampler
	// keeps following it and keeps its own ticks, which sample the worker.
	since := bootNow(t)
	for len(prof.Samples()) < 500 {
		spinUntil(t, p, 0, c, "an own tick sample of the worker", func() bool {
			for _, smp := range c.samples {
				if smp.TID == truth.TID && !smp.Followed && smp.BootNs > since {
					return true
				}
			}
			return false
		})
		since = bootNow(t)
	}
	log.mu.Lock()
	for _, st := range log.all {
		if !follows(st, prof.ID()) || !st.OwnTicks || st.Err != nil || st.Programs[0].Sampled {
			t.Errorf("status %+v: the program stopped being followed, or own ticks closed", st)
		}
	}
	log.mu.Unlock()
	stats, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats.ProfilerSamples != 0 || stats.Followed != 0 {
		t.Errorf("stats %+v: the hrtimer should not see context switch events", stats)
	}
	t.Logf("profiler runs %d, status %+v", len(prof.Samples()), s.FollowStatus())
}

// A profiler paused when it is found (loaded, perf events not running)
// stays followed, own ticks open, no error, for as long as it stays
// paused; once it resumes, its samples are followed and own ticks close.
// Where fentry works, a quiet program moves to the hrtimer method (our
// fentry link would keep an exited profiler's program loaded): it stays in
// the status throughout, and its samples are seen again once it resumes.
func TestFollowPausedProfiler(t *testing.T) {
	shortTimings(t, time.Second)
	// A name of its own: other tests on this host may run fake profilers.
	const name = "fake_paused"
	prof := startProfiler(t, 97, name)
	if err := prof.Pause(); err != nil {
		t.Fatal(err)
	}
	log := newStatusLog()
	s, _, st := startFollowing(t, name, 10*time.Millisecond, log)
	if !follows(st, prof.ID()) || !st.OwnTicks || st.Err != nil || st.Programs[0].Sampled {
		t.Fatalf("status %+v: want program %d followed, not sampled, own ticks open, no error", st, prof.ID())
	}
	method := st.Programs[0].Method
	// The profiler's pause: longer than the fentry quiet time (1 s here),
	// and than the 3 s after which a silent program used to be let go.
	const pause = 4 * time.Second
	time.Sleep(pause)
	if err := prof.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	log.wait(t, statusWait, "resumed profiler sampled, own ticks closed, no error", func(st FollowStatus) bool {
		return follows(st, prof.ID()) && st.Programs[0].Sampled && !st.OwnTicks && st.Err == nil
	})
	t.Logf("%s: resumed profiler's samples seen %v after it resumed", method, time.Since(resumed))
	if method == MethodFentry {
		if err := prof.Pause(); err != nil {
			t.Fatal(err)
		}
		before, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause)
		if err := prof.Resume(); err != nil {
			t.Fatal(err)
		}
		waitStats(t, s, statusWait, func(st Stats) bool { return st.ProfilerSamples > before.ProfilerSamples })
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, st := range log.all {
		if !follows(st, prof.ID()) || st.Err != nil {
			t.Errorf("status %+v: a paused program must stay followed", st)
		}
	}
}

// A program counts as followed by the hrtimer only while the timer program
// is attached: when attaching it fails, the program is not listed, own
// ticks stay open and the status says why (here the attach is made to
// fail; with fentry working, the program is followed by it instead).
func TestFollowTimerAttachFailure(t *testing.T) {
	const name = "fake_noattach"
	prof := startProfiler(t, 97, name)
	injected := errors.New("injected attach failure")
	attachTimer = func(*ebpf.Program) (link.Link, error) { return nil, injected }
	defer func() {
		attachTimer = func(p *ebpf.Program) (link.Link, error) {
			return link.AttachTracing(link.TracingOptions{Program: p})
		}
	}()
	if err := newSampler(t, Options{}).Close(); err != nil { // the kernel allows own ticks
		t.Fatal(err)
	}
	s, err := New(Options{Follow: FollowOptions{Programs: []string{name}, OwnTicks: OwnTicksUnlessFollowing}})
	if err != nil {
		t.Fatalf("New: %v; want a sampler on own ticks", err)
	}
	defer s.Close()
	st := s.FollowStatus()
	t.Logf("status: %+v", st)
	if st.Fallback == nil {
		if !follows(st, prof.ID()) || st.Programs[0].Method != MethodFentry {
			t.Fatalf("fentry works: status %+v: want the program followed by it", st)
		}
		return
	}
	if follows(st, prof.ID()) || !st.OwnTicks {
		t.Errorf("status %+v: the timer is not attached: want the program not followed, own ticks open", st)
	}
	if st.Err == nil || !errors.Is(st.Err, injected) || st.Method != "" {
		t.Errorf("status %+v: want no method and the attach error", st)
	}
	if s.follow.timer != nil || s.follow.timerLink != nil {
		t.Errorf("timer program or link kept after the failure")
	}

	_, err = New(Options{Follow: FollowOptions{Programs: []string{name}, OwnTicks: OwnTicksNever}})
	t.Logf("OwnTicksNever: %v", err)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, injected) {
		t.Errorf("OwnTicksNever: New: %v; want ErrUnavailable with the attach error", err)
	}
}

// A profiler that sampled, then pauses its perf events but keeps its
// program loaded: once it has been silent for the quiet time the program
// counts as silent (not sampled), own ticks reopen and capture the tracked
// thread, no error; when it resumes, its samples are followed again and
// own ticks close. The program stays followed throughout.
func TestFollowSilentAfterSampling(t *testing.T) {
	shortTimings(t, time.Second)
	const name = "fake_silent"
	prof := startProfiler(t, 97, name)
	log := newStatusLog()
	s, c, _ := startFollowing(t, name, 10*time.Millisecond, log)
	p, truth := trackedWorker(t, s)
	sampled := func(st FollowStatus) bool {
		return follows(st, prof.ID()) && st.Programs[0].Sampled && !st.Programs[0].Silent && !st.OwnTicks && st.Err == nil
	}
	log.wait(t, statusWait, "sampled, own ticks closed", sampled)
	if err := prof.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	log.wait(t, statusWait, "silent, own ticks open, still followed", func(st FollowStatus) bool {
		return follows(st, prof.ID()) && !st.Programs[0].Sampled && st.Programs[0].Silent && st.OwnTicks && st.Err == nil
	})
	t.Logf("silent %v after the pause (quiet time 1 s)", time.Since(paused))
	if method, ownTicks := s.Following(); method != "" || !ownTicks {
		t.Errorf("Following() = %q, %v while silent: want \"\", true", method, ownTicks)
	}
	since := bootNow(t)
	ownTick := func() bool { // c.mu held
		for _, smp := range c.samples {
			if smp.TID == truth.TID && smp.BootNs > since && !smp.Followed {
				return true
			}
		}
		return false
	}
	// Spun until one is seen: a starved run gets fewer ticks, never none.
	for deadline := time.Now().Add(statusWait); !c.waitFor(0, ownTick); p.Do("spin 0 100") {
		if time.Now().After(deadline) {
			t.Fatalf("no own-tick sample of tid %d while the profiler is silent", truth.TID)
		}
	}
	if err := prof.Resume(); err != nil {
		t.Fatal(err)
	}
	log.wait(t, statusWait, "sampled again, own ticks closed", sampled)
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, st := range log.all {
		if !follows(st, prof.ID()) || st.Err != nil {
			t.Errorf("status %+v: a silent program must stay followed", st)
		}
	}
}

// switchContexts sleeps and wakes a thread until the test ends, so that a
// profiler sampling at context switches has events to sample.
func switchContexts(t *testing.T) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ts := unix.NsecToTimespec(int64(100 * time.Microsecond))
		for {
			select {
			case <-done:
				return
			default:
				_ = unix.Nanosleep(&ts, nil)
			}
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
}

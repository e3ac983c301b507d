// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// statusWait bounds waits for the watcher (a rescan every 250 ms): generous,
// for 2 shared cores; the latencies are logged, not asserted.
const statusWait = 10 * time.Second

// startProfiler starts a fake profiler until the test ends.
func startProfiler(t testing.TB, hz int, name string) *fakeprof.Profiler {
	t.Helper()
	testenv.RequireRoot(t)
	p, err := fakeprof.Start(hz, name)
	if err != nil {
		testenv.Missing(t, "fake profiler: "+err.Error())
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// statusLog records OnChange calls; wait waits for a status that holds.
type statusLog struct {
	mu   sync.Mutex
	all  []FollowStatus
	seen chan struct{}
}

func newStatusLog() *statusLog { return &statusLog{seen: make(chan struct{}, 1)} }

func (l *statusLog) onChange(st FollowStatus) {
	l.mu.Lock()
	l.all = append(l.all, st)
	l.mu.Unlock()
	select {
	case l.seen <- struct{}{}:
	default:
	}
}

// wait returns how long it took until the last status satisfied cond.
func (l *statusLog) wait(t *testing.T, timeout time.Duration, what string, cond func(FollowStatus) bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		ok := len(l.all) > 0 && cond(l.all[len(l.all)-1])
		var last FollowStatus
		if len(l.all) > 0 {
			last = l.all[len(l.all)-1]
		}
		l.mu.Unlock()
		if ok {
			return time.Since(start)
		}
		select {
		case <-l.seen:
		case <-deadline.C:
			t.Fatalf("%s: not within %v; last status %+v", what, timeout, last)
		}
	}
}

// startFollowing starts a sampler that follows the programs named name
// (own ticks unless following, rescan 0 for the default, status changes
// to log), logs its first status and skips the test where following is
// unavailable.
func startFollowing(t *testing.T, name string, rescan time.Duration, log *statusLog) (*Sampler, *collector, FollowStatus) {
	t.Helper()
	s, c := startSampler(t, Options{Follow: FollowOptions{
		Programs: []string{name},
		OwnTicks: OwnTicksUnlessFollowing,
		Rescan:   rescan,
		OnChange: log.onChange,
	}})
	st := s.FollowStatus()
	t.Logf("status: %+v", st)
	if st.Method == "" {
		testenv.Missing(t, "following unavailable: "+errString(st.Err))
	}
	return s, c, st
}

func follows(st FollowStatus, id ebpf.ProgramID) bool {
	for _, p := range st.Programs {
		if p.ID == uint32(id) {
			return true
		}
	}
	return false
}

// trackedWorker starts a publisher whose worker 0 publishes a record, and
// tracks it.
func trackedWorker(t testing.TB, s *Sampler) (*threadpub.Publisher, threadpub.Truth) {
	t.Helper()
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	p.Threads(1)
	truth := p.Set(0, record(7))
	loc, err := tlsvar.Resolve("/proc", p.PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Track(p.PID, loc); err != nil {
		t.Fatal(err)
	}
	return p, truth
}

// checkFollowed: every profiler run on tid in (from, to] has exactly one
// Followed sample of tid since the run before it, and no Followed sample
// of tid in that span is left without its run. The gap is logged, not
// asserted: on a virtual machine (this host included) a vCPU descheduled
// inside the interrupt makes milliseconds pass between the two programs.
func checkFollowed(t *testing.T, runs []fakeprof.Sample, c *collector, tid int, from, to uint64) int {
	t.Helper()
	var mine []fakeprof.Sample
	for _, r := range runs {
		if r.TID == tid && r.BootNs > from && r.BootNs <= to {
			mine = append(mine, r)
		}
	}
	if len(mine) == 0 {
		t.Fatalf("the profiler never sampled tid %d", tid)
	}
	// The sampler's ring buffer is read on its own: wait until it caught up.
	win := uint64(time.Millisecond)
	c.waitFor(5*time.Second, func() bool {
		n := 0
		for _, s := range c.samples {
			if s.TID == tid && s.Followed && s.BootNs > from-win && s.BootNs <= to {
				n++
			}
		}
		return n >= len(mine)
	})
	var followed []Sample
	for _, s := range c.matching(tid, from-win) {
		if s.Followed && s.BootNs <= to {
			followed = append(followed, s)
		}
	}
	// The runs and captures of tid alternate: each run has exactly one
	// capture since the run before it on that thread (an order no clock
	// jump blurs).
	sort.Slice(followed, func(i, j int) bool { return followed[i].BootNs < followed[j].BootNs })
	prev, i := from-uint64(time.Millisecond), 0
	var worst time.Duration
	for _, r := range mine {
		n := 0
		for ; i < len(followed) && followed[i].BootNs <= r.BootNs; i++ {
			if followed[i].BootNs > prev {
				n++
				worst = max(worst, time.Duration(r.BootNs-followed[i].BootNs))
			}
		}
		if n != 1 {
			t.Errorf("profiler run on tid %d at %d: %d followed samples since its run before (at %d), want 1", tid, r.BootNs, n, prev)
		}
		prev = r.BootNs
	}
	for ; i < len(followed); i++ {
		t.Errorf("followed sample of tid %d at %d after the last profiler run (at %d)", tid, followed[i].BootNs, prev)
	}
	t.Logf("%d profiler runs on tid %d, %d followed samples, capture at most %v before the run", len(mine), tid, len(followed), worst)
	return len(mine)
}

// spinAndStop keeps the worker on CPU for ms, then stops the profiler (its
// runs all delivered); it returns the boot-time span.
func spinAndStop(t *testing.T, p *threadpub.Publisher, prof *fakeprof.Profiler, ms int) (uint64, uint64) {
	t.Helper()
	from := bootNow(t)
	p.Do("spin 0 %d", ms)
	to := bootNow(t)
	if err := prof.Stop(); err != nil {
		t.Fatal(err)
	}
	return from, to
}

// hrtimerOnly: the test follows with the hrtimer method even where the
// kernel allows fentry (test/vm's guests), so both methods are tested there.
func hrtimerOnly(t testing.TB) {
	fentryOff = true
	t.Cleanup(func() { fentryOff = false })
}

// Following through the profiler's sampling timer: one capture per
// profiler run on a tracked thread, on that thread, just before the run;
// with OwnTicksUnlessFollowing no own tick meanwhile.
func TestFollowHrtimer(t *testing.T) {
	hrtimerOnly(t)
	prof := startProfiler(t, 97, fakeprof.DefaultName)
	log := newStatusLog()
	s, c, st := startFollowing(t, fakeprof.DefaultName, 0, log)
	if !follows(st, prof.ID()) || st.Err != nil {
		t.Fatalf("status %+v: want program %d followed", st, prof.ID())
	}
	log.wait(t, statusWait, "the program's first sample seen, own ticks closed", func(st FollowStatus) bool {
		return follows(st, prof.ID()) && st.Programs[0].Sampled && !st.OwnTicks
	})
	if st.Method != MethodHrtimer || st.Programs[0].Method != MethodHrtimer {
		t.Fatalf("status %+v: want the program followed by the hrtimer", st)
	}
	p, truth := trackedWorker(t, s)
	st0, _ := s.Stats()
	from, to := spinAndStop(t, p, prof, 1500)
	checkFollowed(t, prof.Samples(), c, truth.TID, from, to)

	st1, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", st1)
	if st1.Samples-st0.Samples != st1.Followed-st0.Followed || st1.Followed == st0.Followed {
		t.Errorf("stats %+v → %+v: every capture should be a followed one", st0, st1)
	}
	c.mu.Lock()
	for _, smp := range c.samples {
		if !smp.Followed && smp.BootNs <= to {
			t.Errorf("own tick sample while following: %+v", smp)
			break
		}
	}
	c.mu.Unlock()
}

// The fentry method where the kernel has BPF trampolines; where it does
// not (this project's machine: every fentry load is EPERM), the sampler
// says so and follows through the hrtimer instead.
func TestFollowFentry(t *testing.T) {
	prof := startProfiler(t, 97, fakeprof.DefaultName)
	s, c := startSampler(t, Options{Follow: FollowOptions{Programs: []string{fakeprof.DefaultName}, OwnTicks: OwnTicksNever}})
	st := s.FollowStatus()
	t.Logf("status: %+v (fallback: %v)", st, st.Fallback)
	if len(st.Programs) != 1 || st.Programs[0].ID != uint32(prof.ID()) {
		t.Fatalf("status %+v: want program %d followed", st, prof.ID())
	}
	switch st.Method {
	case MethodFentry:
		if st.Fallback != nil || st.Programs[0].Method != MethodFentry {
			t.Fatalf("status %+v: fentry works, want the program followed by it", st)
		}
	case MethodHrtimer:
		if st.Fallback == nil || st.Programs[0].Method != MethodHrtimer {
			t.Fatalf("status %+v: want the fentry refusal and the hrtimer fallback", st)
		}
		t.Logf("fentry refused here, following through the hrtimer: %v", st.Fallback)
	default:
		testenv.Missing(t, "following unavailable: "+errString(st.Err))
	}
	if st.OwnTicks {
		t.Errorf("OwnTicksNever, own ticks open")
	}
	p, truth := trackedWorker(t, s)
	from, to := spinAndStop(t, p, prof, 1000)
	checkFollowed(t, prof.Samples(), c, truth.TID, from, to)
}

// A profiler restart (new program ID) is followed again (the latency is
// logged); meanwhile own ticks run (OwnTicksUnlessFollowing).
func TestFollowRestart(t *testing.T) {
	prof := startProfiler(t, 97, fakeprof.DefaultName)
	log := newStatusLog()
	s, c, _ := startFollowing(t, fakeprof.DefaultName, 0, log)
	log.wait(t, statusWait, "first profiler followed", func(st FollowStatus) bool { return follows(st, prof.ID()) && !st.OwnTicks })
	p, truth := trackedWorker(t, s)

	old := prof.ID()
	if err := prof.Close(); err != nil {
		t.Fatal(err)
	}
	d := log.wait(t, statusWait, "profiler gone, own ticks back", func(st FollowStatus) bool { return len(st.Programs) == 0 && st.OwnTicks })
	t.Logf("profiler gone noticed in %v", d)
	since := bootNow(t)
	spinUntil(t, p, 0, c, "an own tick sample while no profiler runs", func() bool {
		for _, smp := range c.samples {
			if smp.TID == truth.TID && !smp.Followed && smp.BootNs > since {
				return true
			}
		}
		return false
	})

	prof2 := startProfiler(t, 97, fakeprof.DefaultName)
	if prof2.ID() == old {
		t.Fatalf("restarted profiler has the same ID %d", old)
	}
	d = log.wait(t, statusWait, "restarted profiler followed, own ticks closed", func(st FollowStatus) bool {
		return follows(st, prof2.ID()) && !st.OwnTicks
	})
	t.Logf("restarted profiler (id %d → %d) followed in %v", old, prof2.ID(), d)
	from, to := spinAndStop(t, p, prof2, 1000)
	checkFollowed(t, prof2.Samples(), c, truth.TID, from, to)
}

// Nothing else is captured: threads of untracked processes (sampled by
// the profiler all the same) and timers of other perf_event programs.
func TestFollowOnlyFollowedAndTracked(t *testing.T) {
	log := newStatusLog()
	s, c := startSampler(t, Options{Follow: FollowOptions{
		Programs: []string{fakeprof.DefaultName},
		OwnTicks: OwnTicksNever,
		OnChange: log.onChange,
	}})
	if st := s.FollowStatus(); st.Method == "" || st.OwnTicks || len(st.Programs) != 0 {
		t.Fatalf("status %+v: want a method, no own ticks, nothing followed yet", st)
	}
	other := startProfiler(t, 199, "other_profiler")
	prof := startProfiler(t, 97, fakeprof.DefaultName)
	log.wait(t, statusWait, "profiler followed", func(st FollowStatus) bool { return follows(st, prof.ID()) })
	if follows(s.FollowStatus(), other.ID()) {
		t.Fatalf("other_profiler followed: %+v", s.FollowStatus())
	}
	p, truth := trackedWorker(t, s)
	untracked := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	untracked.Threads(1)
	untracked.Set(0, record(9))
	st0, _ := s.Stats()
	from := bootNow(t)
	done := make(chan struct{})
	go func() { untracked.Do("spin 0 1000"); close(done) }()
	p.Do("spin 0 1000")
	<-done
	to := bootNow(t)
	if err := prof.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := other.Stop(); err != nil {
		t.Fatal(err)
	}
	checkFollowed(t, prof.Samples(), c, truth.TID, from, to)
	st1, _ := s.Stats()
	runs := 0
	for _, r := range prof.Samples() {
		if r.BootNs > from && r.BootNs <= to {
			runs++
		}
	}
	seen := st1.ProfilerSamples - st0.ProfilerSamples
	t.Logf("profiler samples counted %d, fake_profiler runs in the span %d, other_profiler's %d", seen, runs, len(other.Samples()))
	if seen > uint64(len(prof.Samples())) {
		t.Errorf("%d followed profiler samples, but fake_profiler ran %d times: other timers counted", seen, len(prof.Samples()))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, smp := range c.samples {
		if smp.PID != p.PID || !smp.Followed {
			t.Fatalf("sample %+v: want only followed samples of pid %d", smp, p.PID)
		}
	}
}

// Following that cannot work fails New only when own ticks are not
// allowed; this machine has no such kernel, so the reasons are unit-tested.
func TestFollowOptions(t *testing.T) {
	for _, bad := range []FollowOptions{
		{Programs: []string{"x"}, OwnTicks: OwnTicksNever + 1},
		{Programs: []string{"x"}, Rescan: -time.Second},
		{Programs: []string{""}},
	} {
		if _, err := bad.withDefaults(); err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("%+v: %v, want a plain error", bad, err)
		}
	}
	o, err := FollowOptions{Programs: []string{"x"}}.withDefaults()
	if err != nil || o.Rescan != DefaultRescan {
		t.Errorf("defaults: %+v, %v", o, err)
	}
	f := &follower{fentryErr: errors.New("fentry: EPERM"), timerErr: errors.New("hrtimer: no address")}
	if f.method() != "" || f.unavailable() == nil {
		t.Errorf("neither method: method %q, err %v", f.method(), f.unavailable())
	}
}

func TestMatchesAny(t *testing.T) {
	for _, tc := range []struct {
		names      []string
		kernel, fn string
		want       bool
	}{
		{[]string{"native_tracer_entry"}, "native_tracer_e", "native_tracer_entry", true},
		{[]string{"native_tracer_entry"}, "native_tracer_e", "", true}, // no BTF: truncation
		{[]string{"native_tracer_e"}, "native_tracer_e", "native_tracer_entry", true},
		{[]string{"native_tracer_entry_2"}, "native_tracer_e", "native_tracer_entry", false},
		{[]string{"fake_profiler"}, "fake_profiler", "fake_profiler", true},
		{[]string{"fake"}, "fake_profiler", "", false},
		{[]string{"a", "b"}, "b", "", true},
	} {
		if got := matchesAny(tc.names, tc.kernel, tc.fn); got != tc.want {
			t.Errorf("matchesAny(%q, %q, %q) = %v", tc.names, tc.kernel, tc.fn, got)
		}
	}
}

func TestSwEventHrtimerAddr(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kallsyms")
	body := "ffffffff81000000 T _stext\n" +
		"ffffffff812a3b40 t perf_swevent_hrtimer\n" +
		"ffffffff812a3c00 t perf_swevent_hrtimer_x\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := swEventHrtimerAddr(path); got != 0xffffffff812a3b40 {
		t.Errorf("address %#x", got)
	}
	hidden := filepath.Join(t.TempDir(), "kallsyms")
	if err := os.WriteFile(hidden, []byte("0000000000000000 t perf_swevent_hrtimer\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := swEventHrtimerAddr(hidden); got != 0 {
		t.Errorf("hidden: %#x", got)
	}
	if got := swEventHrtimerAddr(filepath.Join(t.TempDir(), "none")); got != 0 {
		t.Errorf("missing file: %#x", got)
	}
}

// Close detaches and unloads what following loaded (the timer program,
// its link) and stops the watcher (goleak checks the goroutine).
func TestFollowCloseReleases(t *testing.T) {
	prof := startProfiler(t, 97, fakeprof.DefaultName)
	opts := Options{Follow: FollowOptions{Programs: []string{fakeprof.DefaultName}}}
	s := newSampler(t, opts)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	base := fdSnapshot(t)
	s = newSampler(t, opts)
	st := s.FollowStatus()
	if !follows(st, prof.ID()) {
		_ = s.Close() // its watcher must not outlive the test (goleak)
		testenv.Missing(t, fmt.Sprintf("not following: %+v", st))
	}
	// What following loaded: the timer program (loaded at New whenever
	// kallsyms allows, attached while the hrtimer method follows) and,
	// where fentry follows, the program's fentry program.
	var ids []ebpf.ProgramID
	for _, p := range []*ebpf.Program{s.follow.timer, s.follow.progs[prof.ID()].prog} {
		if p == nil {
			continue
		}
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := info.ID()
		ids = append(ids, id)
	}
	t.Logf("method %s: programs %v loaded by following", st.Programs[0].Method, ids)
	if len(ids) == 0 {
		t.Fatalf("status %+v: following loaded no program", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A tracing link drops its program after an RCU grace period.
	for _, id := range ids {
		var gone error
		testenv.EventuallyWithin(t, statusWait, fmt.Sprintf("program %d loaded by following gone after Close", id), func() bool {
			p, err := ebpf.NewProgramFromID(id)
			if gone = err; err != nil {
				return true
			}
			p.Close()
			return false
		})
		if !errors.Is(gone, os.ErrNotExist) {
			t.Errorf("program %d loaded by following, after Close: %v, want ErrNotExist", id, gone)
		}
	}
	checkNoNewFDs(t, base, "after Close")
}

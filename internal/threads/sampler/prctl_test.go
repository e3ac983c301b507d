// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"os"
	"os/exec"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// ensureTracefs mounts tracefs at /sys/kernel/tracing when it is not there
// (the tracepoint hook needs it to find syscalls:sys_exit_prctl), and says
// so. It stays mounted: other tests and tools may use it meanwhile.
func ensureTracefs(tb testing.TB) {
	tb.Helper()
	testenv.RequireRoot(tb)
	if _, err := os.Stat("/sys/kernel/tracing/events"); err == nil {
		return
	}
	if err := unix.Mount("nodev", "/sys/kernel/tracing", "tracefs", 0, ""); err != nil {
		testenv.Missing(tb, "tracefs not mounted and mounting it failed: "+err.Error())
	}
	tb.Logf("mounted tracefs at /sys/kernel/tracing (it was not mounted)")
}

// namedMapping is an anonymous page to name with prctl.
func namedMapping(tb testing.TB) []byte {
	tb.Helper()
	m, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = unix.Munmap(m) })
	return m
}

// setVMAName is prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, m, len, name) as a
// publisher calls it; its result is ignored (EINVAL without
// CONFIG_ANON_VMA_NAME: the call is the signal either way).
func setVMAName(m []byte, option, arg2 uintptr, name string) {
	b := append([]byte(name), 0)
	_, _, _ = unix.Syscall6(unix.SYS_PRCTL, option, arg2, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&b[0])), 0)
}

// prctlOf counts the prctl events of pid seen so far.
func (c *collector) prctlOf(pid int) int {
	n := 0
	for _, e := range c.prctl {
		if e.pid == pid {
			n++
		}
	}
	return n
}

// The tracepoint is attached whenever tracefs is mounted at New, even when
// it was not when the process (or an earlier sampler) started.
func TestPrctlHookKinds(t *testing.T) {
	requireFreshTracefs(t)
	// A sampler first, while tracefs may be missing: what an earlier test
	// of this binary, or the collector before tracefs is mounted, does.
	if err := newSampler(t, Options{}).Close(); err != nil {
		t.Fatal(err)
	}
	ensureTracefs(t)
	for _, tc := range []struct {
		force PrctlHook
		want  PrctlHook
	}{
		{PrctlHookAuto, PrctlHookTracepoint},
		{PrctlHookRawTracepoint, PrctlHookRawTracepoint},
	} {
		t.Run(string(tc.want), func(t *testing.T) {
			// One window for the whole test: its count of this process's
			// sent events is the kernel's, updated in the prctl call.
			s, c := startSampler(t, Options{PrctlHook: tc.force, PrctlWindow: time.Hour})
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.PrctlHook != tc.want {
				t.Fatalf("PrctlHook = %q, want %q", st.PrctlHook, tc.want)
			}
			m := namedMapping(t)
			pid := os.Getpid()
			sent := func() uint64 {
				var w samplerPrctlWindow
				if err := s.coll.Maps[samplerMapPrctlWindows].Lookup(uint32(pid), &w); err != nil {
					return 0 // no event yet
				}
				return w.Sent
			}
			for i, name := range []string{"OTEL_CTX", "DD_OTEL_CTX"} {
				c.mu.Lock()
				before := c.prctlOf(pid)
				c.mu.Unlock()
				// Not reported: another name (Go runtimes name their heap
				// so), a name that only starts like ours, another option,
				// another PR_SET_VMA sub-option: the kernel's count of
				// sent events, updated in each call, does not move.
				setVMAName(m, unix.PR_SET_VMA, unix.PR_SET_VMA_ANON_NAME, "go: heap")
				setVMAName(m, unix.PR_SET_VMA, unix.PR_SET_VMA_ANON_NAME, name+"X")
				setVMAName(m, unix.PR_SET_VMA, unix.PR_SET_VMA_ANON_NAME, name[:len(name)-1])
				setVMAName(m, unix.PR_SET_NAME, 0, name)
				setVMAName(m, unix.PR_SET_VMA, 1, name)
				if n := sent(); n != uint64(i) {
					t.Errorf("%s, %s: %d events of this process sent before the name itself, want %d (the others are not context names)", tc.want, name, n, i)
				}
				// Then the name itself: one more, delivered.
				setVMAName(m, unix.PR_SET_VMA, unix.PR_SET_VMA_ANON_NAME, name)
				if n := sent(); n != uint64(i+1) {
					t.Errorf("%s, %s: %d events of this process sent, want %d", tc.want, name, n, i+1)
				}
				if !c.waitFor(10*time.Second, func() bool { return c.prctlOf(pid) > before }) {
					t.Fatalf("%s: prctl naming a mapping %s not reported", tc.want, name)
				}
			}
			if st, err = s.Stats(); err != nil {
				t.Fatal(err)
			}
			if st.Prctl == 0 {
				t.Errorf("Stats.Prctl = 0 after reported events")
			}
			t.Logf("%s: Prctl %d, PrctlDropped %d", st.PrctlHook, st.Prctl, st.PrctlDropped)
		})
	}
}

// TestPrctlLimitedPerProcess: a process naming its mapping in a loop gets
// two events sent per PrctlWindow (the window's first and one more, which
// makes user space poll it at the window's end), the rest counted as
// limited; another process's event, named just after, is sent (the limit
// is per process). The child's event is the barrier: events of the ring
// arrive in order.
func TestPrctlLimitedPerProcess(t *testing.T) {
	const calls = 100
	s, c := startSampler(t, Options{PrctlWindow: time.Hour})
	before, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	m := namedMapping(t)
	for range calls {
		setVMAName(m, unix.PR_SET_VMA, unix.PR_SET_VMA_ANON_NAME, "OTEL_CTX")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), prctlOnceEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	child := cmd.Process.Pid
	if !c.waitFor(10*time.Second, func() bool { return c.prctlOf(child) > 0 }) {
		t.Fatal("the other process's event was not sent")
	}
	c.mu.Lock()
	got := c.prctlOf(os.Getpid()) // a batch delivers a PID once
	c.mu.Unlock()
	if got == 0 {
		t.Errorf("no event of this process delivered")
	}
	var w samplerPrctlWindow
	if err := s.coll.Maps[samplerMapPrctlWindows].Lookup(uint32(os.Getpid()), &w); err != nil {
		t.Fatalf("this process's window: %v", err)
	}
	if w.Sent != 2 {
		t.Errorf("this process's window sent %d events of %d calls, want 2", w.Sent, calls)
	}
	after, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if n := after.PrctlLimited - before.PrctlLimited; n < calls-2 {
		t.Errorf("PrctlLimited grew by %d, want at least %d", n, calls-2)
	}
	t.Logf("%s: %d calls: %d sent, PrctlLimited +%d", after.PrctlHook, calls, w.Sent, after.PrctlLimited-before.PrctlLimited)
}

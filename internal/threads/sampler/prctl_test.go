package sampler

import (
	"os"
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
			s, c := startSampler(t, Options{PrctlHook: tc.force})
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.PrctlHook != tc.want {
				t.Fatalf("PrctlHook = %q, want %q", st.PrctlHook, tc.want)
			}
			m := namedMapping(t)
			pid := os.Getpid()
			for _, name := range []string{"OTEL_CTX", "DD_OTEL_CTX"} {
				c.mu.Lock()
				before := c.prctlOf(pid)
				c.mu.Unlock()
				// Not reported: another name (Go runtimes name their heap
				// so), a name that only starts like ours, another option,
				// another PR_SET_VMA sub-option. Then the name itself, as
				// a barrier: events of one thread arrive in order.
				setVMAName(m, unix.PR_SET_VMA, unix.PR_SET_VMA_ANON_NAME, "go: heap")
				setVMAName(m, unix.PR_SET_VMA, unix.PR_SET_VMA_ANON_NAME, name+"X")
				setVMAName(m, unix.PR_SET_VMA, unix.PR_SET_VMA_ANON_NAME, name[:len(name)-1])
				setVMAName(m, unix.PR_SET_NAME, 0, name)
				setVMAName(m, unix.PR_SET_VMA, 1, name)
				setVMAName(m, unix.PR_SET_VMA, unix.PR_SET_VMA_ANON_NAME, name)
				if !c.waitFor(10*time.Second, func() bool { return c.prctlOf(pid) > before }) {
					t.Fatalf("%s: prctl naming a mapping %s not reported", tc.want, name)
				}
				time.Sleep(50 * time.Millisecond) // anything else would have come by now
				c.mu.Lock()
				got := c.prctlOf(pid) - before
				c.mu.Unlock()
				if got != 1 {
					t.Errorf("%s, %s: %d events of this process, want 1 (the others are not context names)", tc.want, name, got)
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

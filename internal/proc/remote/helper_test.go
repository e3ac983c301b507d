// SPDX-License-Identifier: Apache-2.0

//go:build linux

package remote

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testfuse"
)

// inReadv lists the threads of pid inside process_vm_readv, from their
// syscall files (which take no lock of the address space).
func inReadv(t *testing.T, pid int) []string {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
	if err != nil {
		t.Fatal(err)
	}
	var in []string
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		nr, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		if n, err := strconv.Atoi(nr); err == nil && n == unix.SYS_PROCESS_VM_READV {
			in = append(in, f)
		}
	}
	return in
}

// TestHungReadWaitsInTheHelper: a read that hangs (a userfaultfd page
// nobody resolves) leaves a thread of the reader helper in the system
// call, never one of this process, which therefore stays killable; the
// caller gets ErrTimeout, and the helper goes on serving other reads.
func TestHungReadWaitsInTheHelper(t *testing.T) {
	withTimeout(t, 200*time.Millisecond)
	addr, release := uffdPage(t)
	if err := (Memory{PID: os.Getpid()}).ReadAt(make([]byte, 8), addr); !errors.Is(err, ErrTimeout) {
		t.Fatalf("read of a page nobody resolves: %v, want ErrTimeout", err)
	}
	helper := Helper().PID
	if helper == 0 || helper == os.Getpid() {
		t.Fatalf("no reader helper runs (pid %d)", helper)
	}
	testenv.Eventually(t, "the helper's thread in process_vm_readv", func() bool { return len(inReadv(t, helper)) == 1 })
	// The thread says whose it is (ps, the stuck-process list of make unstick).
	if comm, err := os.ReadFile(strings.TrimSuffix(inReadv(t, helper)[0], "syscall") + "comm"); err != nil || strings.TrimSpace(string(comm)) != "otelctx-reader" {
		t.Errorf("the hung read's thread is named %q (%v), want otelctx-reader", comm, err)
	}
	if in := inReadv(t, os.Getpid()); len(in) != 0 {
		t.Errorf("threads of this process in process_vm_readv: %v", in)
	}
	// This process is quarantined now; another is still read.
	if _, err := (Memory{PID: helper}).ReadUint64(firstMapping(t, helper)); err != nil {
		t.Errorf("a read of another process while one hangs: %v", err)
	}
	if got := Helper().PID; got != helper {
		t.Errorf("the helper changed from %d to %d", helper, got)
	}
	release()
	testenv.Eventually(t, "the hung read returned", func() bool { return Stalls().Hung == 0 })
	if in := inReadv(t, helper); len(in) != 0 {
		t.Errorf("helper threads still in process_vm_readv: %v", in)
	}
}

// TestHelperGoroutineName: the goroutines that tests let outlive them
// (testenv.LongLived) are the helper's and the workers'.
func TestHelperGoroutineName(t *testing.T) {
	if _, err := (Memory{PID: os.Getpid()}).ReadUint64(uint64(uintptr(unsafe.Pointer(&word)))); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, f := range []string{testenv.ReaderHelperGoroutine, testenv.ReadWorkerGoroutine} {
		if !strings.Contains(stacks, f+"(") {
			t.Errorf("no goroutine runs %s while the helper runs", f)
		}
	}
}

// TestHelperRestarts: a helper that dies fails its pending reads
// (ErrHelper) and the next read starts another.
func TestHelperRestarts(t *testing.T) {
	m := Memory{PID: os.Getpid()}
	a := uint64(uintptr(unsafe.Pointer(&word)))
	if _, err := m.ReadUint64(a); err != nil {
		t.Fatal(err)
	}
	st := Helper()
	p, err := os.FindProcess(st.PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the killed helper noticed", func() bool { return Helper().PID == 0 })
	if v, err := m.ReadUint64(a); err != nil || v != word {
		t.Fatalf("read after the helper died: %#x, %v", v, err)
	}
	if got := Helper(); got.Starts != st.Starts+1 || got.PID == st.PID {
		t.Errorf("helper after a restart: %+v (before %+v)", got, st)
	}
}

// firstMapping is the start of pid's first mapping.
func firstMapping(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	start, _, _ := strings.Cut(string(b), "-")
	a, err := strconv.ParseUint(start, 16, 64)
	if err != nil {
		t.Fatalf("/proc/%d/maps: %v", pid, err)
	}
	return a
}

// TestHelperKilledWhileReadHeld: a helper killed while one of its threads
// waits for a FUSE READ cannot be reaped (that thread holds it), yet it is
// noticed gone: the worker that waited for it gets ErrHelper and is
// released, and the next read starts another helper.
func TestHelperKilledWhileReadHeld(t *testing.T) {
	withTimeout(t, 200*time.Millisecond)
	fs := testfuse.Mount(t, make([]byte, 4*os.Getpagesize()))
	addr := uint64(uintptr(unsafe.Pointer(&fs.MapUntouched()[0])))
	if err := (Memory{PID: os.Getpid()}).ReadAt(make([]byte, 8), addr); !errors.Is(err, ErrTimeout) {
		t.Fatalf("read of a held FUSE page: %v, want ErrTimeout", err)
	}
	helper := Helper().PID
	testenv.Eventually(t, "the READ held", func() bool { return fs.Pending() == 1 })
	if err := unix.Kill(helper, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the killed helper noticed", func() bool { return Helper().PID != helper })
	testenv.Eventually(t, "the waiting worker released", func() bool { return Stalls().Hung == 0 })
	if _, err := (Memory{PID: helper}).ReadUint64(0); err == nil {
		t.Errorf("read of the dead helper succeeded")
	}
	other := exec.Command("sleep", "600")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	if v, err := (Memory{PID: other.Process.Pid}).ReadUint64(firstMapping(t, other.Process.Pid)); err != nil {
		t.Errorf("a read after the helper died: %#x, %v", v, err)
	}
	if st := Helper(); st.PID == 0 || st.PID == helper {
		t.Errorf("no new helper: %+v (the killed one was %d)", st, helper)
	}
}

// TestStoppedHelperIsNotAHang: a helper that is not run at the deadline
// (stopped here, as a throttled cgroup or a busy host would leave it) is
// waited for: the read returns, nothing is counted as hung.
func TestStoppedHelperIsNotAHang(t *testing.T) {
	const timeout = 100 * time.Millisecond
	withTimeout(t, timeout)
	m := Memory{PID: os.Getpid()}
	a := uint64(uintptr(unsafe.Pointer(&word)))
	if _, err := m.ReadUint64(a); err != nil {
		t.Fatal(err)
	}
	helper := Helper().PID
	if err := unix.Kill(helper, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the helper stopped", func() bool { st, _ := threadState(helper, helper); return st == 'T' })
	// Resumed past three timeouts, well inside MaxReadWaits of them.
	resume := time.AfterFunc(3*timeout, func() { _ = unix.Kill(helper, unix.SIGCONT) })
	t.Cleanup(func() { resume.Stop(); _ = unix.Kill(helper, unix.SIGCONT) })
	before := Stalls()
	if v, err := m.ReadUint64(a); err != nil || v != word {
		t.Fatalf("read while the helper was stopped: %#x, %v", v, err)
	}
	if st := Stalls(); st.Timeouts != before.Timeouts {
		t.Errorf("a stopped helper counted as a hung read: %+v (before %+v)", st, before)
	}
	if st, _ := threadState(helper, helper); st == 'T' {
		t.Errorf("the read returned while the helper was still stopped")
	}
}

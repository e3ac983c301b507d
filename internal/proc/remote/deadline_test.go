// SPDX-License-Identifier: Apache-2.0

//go:build linux

package remote

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// The userfaultfd ABI (include/uapi/linux/userfaultfd.h).
const (
	uffdAPI          = 0xaa
	uffdioAPI        = 0xc018aa3f // _IOWR(0xaa, 0x3f, struct uffdio_api)
	uffdioRegister   = 0xc020aa00 // _IOWR(0xaa, 0x00, struct uffdio_register)
	uffdRegisterMiss = 1
)

// uffdPage maps a page of this process and registers it with a
// userfaultfd nobody reads: a fault on it waits until the returned release
// closes the descriptor. Where the kernel refuses userfaultfd (no
// CAP_SYS_PTRACE with vm.unprivileged_userfaultfd=0, or not built in), the
// test skips (fails under CI=true).
func uffdPage(t *testing.T) (addr uint64, release func()) {
	t.Helper()
	page := os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK, 0, 0)
	if errno != 0 {
		_ = unix.Munmap(mem)
		testenv.Missing(t, "userfaultfd refused by the kernel ("+errno.Error()+")")
	}
	api := [3]uint64{uffdAPI, 0, 0}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uffdioAPI, uintptr(unsafe.Pointer(&api))); errno != 0 {
		t.Fatalf("UFFDIO_API: %v", errno)
	}
	addr = uint64(uintptr(unsafe.Pointer(&mem[0])))
	reg := [4]uint64{addr, uint64(page), uffdRegisterMiss, 0}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uffdioRegister, uintptr(unsafe.Pointer(&reg))); errno != 0 {
		t.Fatalf("UFFDIO_REGISTER: %v", errno)
	}
	closed := false
	release = func() {
		if !closed {
			closed = true
			_ = unix.Close(int(fd)) // the waiting fault resolves (a zero page)
		}
	}
	t.Cleanup(func() {
		release()
		// The abandoned read holds the mapping until it returns.
		testenv.Eventually(t, "the abandoned read returned", func() bool { return Stalls().Hung == 0 })
		_ = unix.Munmap(mem)
	})
	return addr, release
}

// withTimeout sets the read timeout for the test and forgets the
// quarantines it caused.
func withTimeout(t *testing.T, d time.Duration) {
	t.Helper()
	SetReadTimeout(d)
	t.Cleanup(func() {
		SetReadTimeout(0)
		reader.mu.Lock()
		clear(reader.byPID)
		reader.active.Store(0)
		reader.mu.Unlock()
	})
}

// TestReadTimesOutOnUserfaultfdPage: a read of a page whose fault waits
// for a userfaultfd handler that never answers returns ErrTimeout; the
// process is quarantined (its next reads fail at once, without a second
// blocked thread), the blocked read is counted; once the fault is
// resolved, the read returns and is no longer counted. Reads of another
// process go on meanwhile.
func TestReadTimesOutOnUserfaultfdPage(t *testing.T) {
	withTimeout(t, 200*time.Millisecond)
	addr, release := uffdPage(t)
	self := Memory{PID: os.Getpid()}
	before := Stalls()
	buf := make([]byte, 8)
	buf[0] = 0x5a
	if err := self.ReadAt(buf, addr); !errors.Is(err, ErrTimeout) {
		t.Fatalf("read of a userfaultfd page: %v, want ErrTimeout", err)
	}
	st := Stalls()
	if st.Timeouts != before.Timeouts+1 || st.Hung != before.Hung+1 || st.Quarantined < 1 || st.OldestHungNs <= 0 {
		t.Errorf("after the timeout: %+v (before %+v): want one more timeout and hung read, quarantined", st, before)
	}
	if _, err := self.ReadUint64(uint64(uintptr(unsafe.Pointer(&word)))); !errors.Is(err, ErrQuarantined) {
		t.Errorf("a read of the quarantined process: %v, want ErrQuarantined", err)
	}
	ok := make([]bool, 1)
	if _, err := self.ReadEach([][]byte{buf}, []uint64{uint64(uintptr(unsafe.Pointer(&word)))}, ok); !errors.Is(err, ErrQuarantined) || ok[0] {
		t.Errorf("ReadEach of the quarantined process: %v, %v, want ErrQuarantined", err, ok)
	}
	if s := Stalls(); s.Hung != st.Hung {
		t.Errorf("the refused reads blocked: %d hung, want %d", s.Hung, st.Hung)
	}
	release()
	testenv.Eventually(t, "the abandoned read returned", func() bool { return Stalls().Hung == before.Hung })
	if buf[0] != 0x5a {
		t.Errorf("the abandoned read wrote into the caller's buffer: %#x", buf[0])
	}
}

// TestReadTimeoutAlone: a process quarantined does not stop the reads of
// another.
func TestReadTimeoutAlone(t *testing.T) {
	withTimeout(t, 200*time.Millisecond)
	addr, _ := uffdPage(t)
	if err := (Memory{PID: os.Getpid()}).ReadAt(make([]byte, 8), addr); !errors.Is(err, ErrTimeout) {
		t.Fatalf("read of a userfaultfd page: %v, want ErrTimeout", err)
	}
	// A process nobody quarantined: the error is its own, not a refusal.
	other := Memory{PID: 1 << 30}
	if _, err := other.ReadUint64(addr); !errors.Is(err, ErrProcessGone) {
		t.Errorf("read of another process: %v, want ErrProcessGone", err)
	}
}

// TestHungReadsCapped: past MaxHungTotal blocked reads, every read is
// refused at once; the cap is what blocked OS threads cost.
func TestHungReadsCapped(t *testing.T) {
	withTimeout(t, 100*time.Millisecond)
	addr, _ := uffdPage(t)
	reader.mu.Lock()
	reader.hungTotal += MaxHungTotal // as if that many were blocked elsewhere
	reader.mu.Unlock()
	t.Cleanup(func() {
		reader.mu.Lock()
		reader.hungTotal -= MaxHungTotal
		reader.mu.Unlock()
	})
	if err := (Memory{PID: os.Getpid()}).ReadAt(make([]byte, 8), addr); !errors.Is(err, ErrQuarantined) {
		t.Errorf("read with the host's cap of hung reads reached: %v, want ErrQuarantined", err)
	}
}

// BenchmarkReadUint64 is one 8-byte read of this process through the
// deadline reader and the reader helper; BenchmarkRawReadUint64 the
// system call alone, in this process.
func BenchmarkReadUint64(b *testing.B) {
	m := Memory{PID: os.Getpid()}
	a := uint64(uintptr(unsafe.Pointer(&word)))
	b.ReportAllocs()
	for b.Loop() {
		if v, err := m.ReadUint64(a); err != nil || v != word {
			b.Fatal(v, err)
		}
	}
}

func BenchmarkRawReadUint64(b *testing.B) {
	pid := os.Getpid()
	a := uint64(uintptr(unsafe.Pointer(&word)))
	var v uint64
	p := unsafe.Slice((*byte)(unsafe.Pointer(&v)), 8)
	b.ReportAllocs()
	for b.Loop() {
		if n, errno := rawReadAtErrno(pid, p, a); errno != 0 || n != 8 || v != word {
			b.Fatal(v, errno)
		}
	}
}

// TestHungReadsPerUser: once one user's processes hold MaxHungPerUser
// blocked reads, that user's processes are refused at once while another
// user's are still read; a process in a user namespace nobody made, as
// host UID 300005, is nobody's (before: read while nobody was at its cap).
func TestHungReadsPerUser(t *testing.T) {
	testenv.RequireRoot(t)
	other := exec.Command("sleep", "600")
	other.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	argv := testenv.EnterArgs(t, testenv.MintingNamespace(t, 65534, 300000, 8), 5, "sleep", "600")
	minted := exec.Command(argv[0], argv[1:]...)
	if err := minted.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = minted.Process.Kill(); _ = minted.Wait() })
	testenv.Eventually(t, "the minted process entered nobody's namespace as UID 5", func() bool {
		return procstat.RealUID("/proc", minted.Process.Pid) == 300005
	})
	self := Memory{PID: os.Getpid()}
	addr := uint64(uintptr(unsafe.Pointer(&word)))
	saturate := func(uid int) func() {
		reader.mu.Lock()
		defer reader.mu.Unlock()
		for range MaxHungPerUser {
			reader.userHung(uid) // as if that many of its reads were blocked
		}
		return func() {
			reader.mu.Lock()
			defer reader.mu.Unlock()
			for range MaxHungPerUser {
				reader.userReleased(uid)
			}
		}
	}

	undo := saturate(65534)
	if _, err := (Memory{PID: other.Process.Pid}).ReadUint64(0x1000); !errors.Is(err, ErrQuarantined) {
		t.Errorf("read of nobody's process with nobody at its cap: %v, want ErrQuarantined", err)
	}
	if _, err := (Memory{PID: minted.Process.Pid}).ReadUint64(0x1000); !errors.Is(err, ErrQuarantined) {
		t.Errorf("read of host UID 300005's process in nobody's user namespace with nobody at its cap: %v, want ErrQuarantined", err)
	}
	if v, err := self.ReadUint64(addr); err != nil || v != word {
		t.Errorf("read of root's process with nobody at its cap: %v, %v", v, err)
	}
	undo()

	undo = saturate(0)
	if _, err := self.ReadUint64(addr); !errors.Is(err, ErrQuarantined) {
		t.Errorf("read of root's process with root at its cap: %v, want ErrQuarantined", err)
	}

	if _, err := (Memory{PID: other.Process.Pid}).ReadUint64(0x1000); errors.Is(err, ErrQuarantined) {
		t.Errorf("read of nobody's process with root at its cap: refused (%v)", err)
	}
	undo()
	if v, err := self.ReadUint64(addr); err != nil || v != word || reader.saturated.Load() != 0 {
		t.Errorf("after both users' reads returned: %v, %v, %d users at the cap", v, err, reader.saturated.Load())
	}
}

// TestLateWorkerIsNotAHang: a read whose worker is late for this host's
// reasons (asleep or runnable before it reaches the system call: a busy
// host, a throttled container) is waited for past the timeout; only a wait
// inside the call makes a process hung. The wait has a bound too:
// MaxReadWaits timeouts.
func TestLateWorkerIsNotAHang(t *testing.T) {
	const timeout = 50 * time.Millisecond
	withTimeout(t, timeout)
	want := uint64(uintptr(unsafe.Pointer(&word)))
	spin := func(d time.Duration) func() {
		return func() {
			for end := time.Now().Add(d); time.Now().Before(end); {
			}
		}
	}
	sleep := func(d time.Duration) func() { return func() { time.Sleep(d) } }
	for _, tc := range []struct {
		name    string
		delay   func()
		timeout bool
	}{
		{"asleep before the call", sleep(4 * timeout), false},
		{"runnable before the call", spin(4 * timeout), false},
		{"late past the bound", sleep(2 * MaxReadWaits * timeout), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			beforeRawRead = tc.delay
			defer func() { beforeRawRead = nil }()
			before := Stalls()
			got, err := (Memory{PID: os.Getpid()}).ReadUint64(want)
			st := Stalls()
			if tc.timeout {
				if !errors.Is(err, ErrTimeout) || st.Timeouts != before.Timeouts+1 {
					t.Fatalf("read: %v, timeouts %d (before %d); want ErrTimeout after %d waits", err, st.Timeouts, before.Timeouts, MaxReadWaits)
				}
				testenv.Eventually(t, "the late read returned", func() bool { return Stalls().Hung == before.Hung })
				return
			}
			if err != nil || got != word {
				t.Fatalf("read = %#x, %v; want %#x", got, err, word)
			}
			if st.Timeouts != before.Timeouts || st.Quarantined != before.Quarantined {
				t.Errorf("a late worker counted as a hung read: %+v (before %+v)", st, before)
			}
		})
	}
}

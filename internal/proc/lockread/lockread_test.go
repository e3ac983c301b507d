// SPDX-License-Identifier: Apache-2.0

//go:build linux

package lockread

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// Every abandoned read's goroutine must have returned when a test ends
// (each test releases its reads and waits for Hung to reach 0).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout is the read timeout of these tests: short, as the reads
// that exceed it block on a channel of the test, never on a real lock.
const testTimeout = 50 * time.Millisecond

// withTimeout sets the read timeout for the test; at its end it releases
// the reads it blocked (release), waits for their goroutines to return and
// forgets the quarantines it caused.
func withTimeout(t *testing.T, release func()) {
	t.Helper()
	remote.SetReadTimeout(testTimeout)
	OnStall(nil)
	t.Cleanup(func() {
		release()
		testenv.Eventually(t, "the abandoned reads returned", func() bool { return Stalls().Hung == 0 })
		remote.SetReadTimeout(0)
		OnStall(nil)
		g.mu.Lock()
		clear(g.byPID)
		g.active.Store(0)
		g.mu.Unlock()
	})
}

// blocker is a read that blocks until the test releases it.
type blocker struct {
	ch        chan struct{}
	closed    atomic.Bool
	abandoned atomic.Int32 // abandoned callbacks run
}

func newBlocker() *blocker { return &blocker{ch: make(chan struct{})} }

func (b *blocker) read() error { <-b.ch; return nil }

func (b *blocker) release() {
	if b.closed.CompareAndSwap(false, true) {
		close(b.ch)
	}
}

func (b *blocker) onAbandoned() { b.abandoned.Add(1) }

// sleeper starts a process of uid (root: 0) that only sleeps, for its PID
// (what the caps look up is the real UID of /proc/PID/status).
func sleeper(t *testing.T, uid uint32) int {
	t.Helper()
	cmd := exec.Command("sleep", "3600")
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

// TestTimeoutQuarantines: a read past the timeout returns ErrTimeout (its
// process is quarantined: the next reads are refused at once, without
// running); other processes are read meanwhile; once the read returns,
// its abandoned callback runs on its goroutine (once) and it is no longer
// counted hung, but the process stays quarantined for its backoff.
func TestTimeoutQuarantines(t *testing.T) {
	b := newBlocker()
	withTimeout(t, b.release)
	pid, other := os.Getpid(), os.Getppid()
	var stalled atomic.Int32
	OnStall(func(p int, err error) {
		if p == pid && errors.Is(err, ErrTimeout) {
			stalled.Add(1)
		}
	})

	before := Stalls()
	start := time.Now()
	err := Do(pid, b.read, b.onAbandoned)
	if !errors.Is(err, ErrTimeout) || !Stalled(err) {
		t.Fatalf("Do of a blocked read: %v, want ErrTimeout", err)
	}
	t.Logf("abandoned after %v (timeout %v)", time.Since(start), testTimeout)
	if st := Stalls(); st.Timeouts != before.Timeouts+1 || st.Hung != 1 || st.Quarantined != 1 {
		t.Errorf("Stalls after a timeout: %+v, want 1 timeout, 1 hung, 1 quarantined", st)
	}
	if stalled.Load() != 1 {
		t.Errorf("OnStall called %d times for the timeout, want 1", stalled.Load())
	}
	if !Quarantined(pid) || Quarantined(other) {
		t.Errorf("Quarantined(%d) = %v (timed out), Quarantined(%d) = %v (not)", pid, Quarantined(pid), other, Quarantined(other))
	}

	ran := false
	if err := Do(pid, func() error { ran = true; return nil }, nil); !errors.Is(err, ErrQuarantined) || !Stalled(err) || ran {
		t.Errorf("Do of the quarantined process: %v (read ran: %v), want ErrQuarantined without running", err, ran)
	}
	if st := Stalls(); st.Refused != before.Refused+1 || st.Hung != 1 {
		t.Errorf("Stalls after a refusal: %+v, want 1 refused, still 1 hung", st)
	}
	sentinel := errors.New("the read's own error")
	if err := Do(other, func() error { return sentinel }, nil); !errors.Is(err, sentinel) {
		t.Errorf("Do of another process while one is quarantined: %v, want its read's error", err)
	}

	if n := b.abandoned.Load(); n != 0 {
		t.Fatalf("abandoned callback ran %d times before the read returned", n)
	}
	b.release()
	testenv.Eventually(t, "the abandoned read returned, its callback run", func() bool {
		return b.abandoned.Load() == 1 && Stalls().Hung == 0
	})
	if !Quarantined(pid) {
		t.Error("the process is no longer quarantined as soon as its read returned: want its backoff")
	}
	if err := Do(pid, func() error { return nil }, nil); !errors.Is(err, ErrQuarantined) {
		t.Errorf("Do during the backoff: %v, want ErrQuarantined", err)
	}
	if n := b.abandoned.Load(); n != 1 {
		t.Errorf("abandoned callback ran %d times, want 1", n)
	}
}

// TestWithinTimeout: a read that returns in time returns its own result,
// quarantines nothing and runs no abandoned callback.
func TestWithinTimeout(t *testing.T) {
	withTimeout(t, func() {})
	pid := os.Getpid()
	before := Stalls()
	abandoned := false
	if err := Do(pid, func() error { return nil }, func() { abandoned = true }); err != nil || abandoned {
		t.Errorf("Do of a read that returns at once: %v (abandoned callback: %v)", err, abandoned)
	}
	if err := Do(pid, func() error { return unix.EACCES }, nil); !errors.Is(err, unix.EACCES) || Stalled(err) {
		t.Errorf("Do of a read that fails: %v, want EACCES, not a stall", err)
	}
	if st := Stalls(); st != before || Quarantined(pid) {
		t.Errorf("Stalls after reads in time: %+v, quarantined %v", st, Quarantined(pid))
	}
}

// TestHungPerUser: MaxHungPerUser reads of one user's processes hung, that
// user's other processes are refused (no further blocked goroutine), and
// another user's are read. Once one hung read returns, the user's other
// processes are read again.
func TestHungPerUser(t *testing.T) {
	testenv.RequireRoot(t) // processes of another user
	var bs []*blocker
	withTimeout(t, func() {
		for _, b := range bs {
			b.release()
		}
	})
	const nobody = 65534
	var pids []int
	for range MaxHungPerUser + 1 {
		pids = append(pids, sleeper(t, nobody))
	}
	root := sleeper(t, 0)
	for _, pid := range pids[:MaxHungPerUser] {
		b := newBlocker()
		bs = append(bs, b)
		if err := Do(pid, b.read, nil); !errors.Is(err, ErrTimeout) {
			t.Fatalf("pid %d: %v, want ErrTimeout", pid, err)
		}
	}
	ran := false
	err := Do(pids[MaxHungPerUser], func() error { ran = true; return nil }, nil)
	if !errors.Is(err, ErrQuarantined) || ran {
		t.Errorf("user %d's fifth process with %d of its reads hung: %v (ran %v), want refused", nobody, MaxHungPerUser, err, ran)
	}
	if err := Do(root, func() error { return nil }, nil); err != nil {
		t.Errorf("root's process while user %d is at its cap: %v, want read", nobody, err)
	}
	if st := Stalls(); st.Hung != MaxHungPerUser {
		t.Errorf("Stalls: %+v, want %d hung", st, MaxHungPerUser)
	}
	bs[0].release()
	testenv.Eventually(t, "one hung read returned", func() bool { return Stalls().Hung == MaxHungPerUser-1 })
	if err := Do(pids[MaxHungPerUser], func() error { return nil }, nil); err != nil {
		t.Errorf("user %d's fifth process once a hung read returned: %v, want read", nobody, err)
	}
}

// TestHungTotal: MaxHungTotal reads hung on the host (MaxHungPerUser each
// for as many users), no process is read, root's included.
func TestHungTotal(t *testing.T) {
	testenv.RequireRoot(t)
	var bs []*blocker
	withTimeout(t, func() {
		for _, b := range bs {
			b.release()
		}
	})
	for i := range MaxHungTotal {
		uid := uint32(60000 + i/MaxHungPerUser)
		pid := sleeper(t, uid)
		b := newBlocker()
		bs = append(bs, b)
		if err := Do(pid, b.read, nil); !errors.Is(err, ErrTimeout) {
			t.Fatalf("read %d (pid %d, uid %d): %v, want ErrTimeout", i, pid, uid, err)
		}
	}
	if st := Stalls(); st.Hung != MaxHungTotal || st.Quarantined != MaxHungTotal {
		t.Errorf("Stalls: %+v, want %d hung and quarantined", st, MaxHungTotal)
	}
	for _, pid := range []int{sleeper(t, 60100), os.Getpid()} {
		ran := false
		if err := Do(pid, func() error { ran = true; return nil }, nil); !errors.Is(err, ErrQuarantined) || ran {
			t.Errorf("pid %d with %d reads hung on the host: %v (ran %v), want refused", pid, MaxHungTotal, err, ran)
		}
	}
}

// fifo makes a named pipe in a directory laid out as a /proc (DIR/PID/name)
// and keeps its write end open (so that opening it for reading does not
// wait); it returns the procRoot and the write end.
func fifo(t *testing.T, pid int, name string) (string, *os.File) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return root, w
}

// TestFileAbandoned: a File whose read blocks (a pipe no one writes to,
// standing for a maps file whose process holds its mmap lock) returns
// ErrTimeout; the File is then abandoned: later reads are refused without
// touching their buffers, Close leaves the descriptor to the read's
// goroutine, which closes it once the read returns.
func TestFileAbandoned(t *testing.T) {
	pid := os.Getpid()
	root, w := fifo(t, pid, "maps")
	withTimeout(t, func() { _, _ = w.Write([]byte("late\n")) })
	f, err := Open(root+"/"+strconv.Itoa(pid)+"/maps", pid)
	if err != nil {
		t.Fatal(err)
	}
	osf := f.f
	buf := make([]byte, 64) // the abandoned read's: not looked at again
	if n, err := f.Read(buf); !errors.Is(err, ErrTimeout) || n != 0 {
		t.Fatalf("Read of a pipe no one writes to: %d, %v; want 0, ErrTimeout", n, err)
	}
	if !f.Abandoned() {
		t.Error("Abandoned() false after a timeout")
	}
	other := []byte("untouched")
	if n, err := f.Read(other); !errors.Is(err, ErrQuarantined) || n != 0 || string(other) != "untouched" {
		t.Errorf("Read after the timeout: %d, %v, buffer %q; want 0, ErrQuarantined, buffer untouched", n, err, other)
	}
	if n, err := f.ReadAt(other, 0); !errors.Is(err, ErrQuarantined) || n != 0 || string(other) != "untouched" {
		t.Errorf("ReadAt after the timeout: %d, %v, buffer %q", n, err, other)
	}
	if err := f.Close(); err != nil {
		t.Errorf("Close of an abandoned File: %v", err)
	}
	if _, err := osf.Stat(); err != nil {
		t.Fatalf("the descriptor was closed under the blocked read: %v", err)
	}
	if _, err := w.Write([]byte("late\n")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the read's goroutine closed the file once its read returned", func() bool {
		_, err := osf.Stat()
		return errors.Is(err, os.ErrClosed) && Stalls().Hung == 0
	})
}

// TestFileWithinTimeout: a File reads as its os.File does when its reads
// return in time, and Close closes it.
func TestFileWithinTimeout(t *testing.T) {
	withTimeout(t, func() {})
	path := filepath.Join(t.TempDir(), "maps")
	if err := os.WriteFile(path, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if n, err := f.Read(buf); n != 4 || err != nil || string(buf) != "0123" {
		t.Errorf("Read: %d, %v, %q", n, err, buf)
	}
	if n, err := f.ReadAt(buf, 6); n != 4 || err != nil || string(buf) != "6789" {
		t.Errorf("ReadAt: %d, %v, %q", n, err, buf)
	}
	osf := f.f
	if err := f.Close(); err != nil || f.Abandoned() {
		t.Errorf("Close: %v (abandoned %v)", err, f.Abandoned())
	}
	if _, err := osf.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("the descriptor after Close: %v, want closed", err)
	}
}

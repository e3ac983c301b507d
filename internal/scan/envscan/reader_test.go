// SPDX-License-Identifier: Apache-2.0

//go:build linux

package envscan

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testfuse"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// sleeper starts a process with exactly env, stopped by the test's end.
func sleeper(t *testing.T, env []string) int { return testenv.Sleeper(t, env...).Process.Pid }

// collector gathers consumed pieces under a lock (consume runs on the
// reader's goroutine).
type collector struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *collector) consume(b []byte) { c.mu.Lock(); c.buf.Write(b); c.mu.Unlock() }

func (c *collector) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf.Bytes())
}

func TestReadRealProcess(t *testing.T) {
	pid := sleeper(t, []string{"A=1", "OTEL_SERVICE_NAME=svc"})
	r := NewReader("/proc", 0, 0, 0)
	var c collector
	ticks, err := r.Read(pid, c.consume)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := procstat.StartTicks("/proc", pid); ticks != want {
		t.Fatalf("start ticks %d, want %d", ticks, want)
	}
	if got := string(c.bytes()); got != "A=1\x00OTEL_SERVICE_NAME=svc\x00" {
		t.Fatalf("environ %q", got)
	}
}

// helper starts testdata/environ_helper.c with args and waits for it to
// have moved its environment.
func helper(t *testing.T, args ...string) int {
	t.Helper()
	testenv.RequireRoot(t) // prctl(PR_SET_MM_MAP) needs CAP_SYS_ADMIN
	bin := testpub.CompileC(t, testpub.Compiler(t, testpub.Glibc), "environ_helper", "testdata/environ_helper.c", "-O2", "-Wall")
	p := testpub.RunProc(t, "environ_helper", 10*time.Second, nil, bin, args...)
	if l := p.ReadLine(); l != "ready" {
		t.Fatalf("environ_helper: %q", l)
	}
	return p.PID
}

// TestReadTenMegabytes: a 10 MB environment is read up to MaxBytes, no
// further.
func TestReadTenMegabytes(t *testing.T) {
	pid := helper(t, "big", "10")
	var whole collector
	if _, err := NewReader("/proc", time.Minute, 0, 0).Read(pid, whole.consume); err != nil {
		t.Fatal(err)
	}
	if n := len(whole.bytes()); n < 10<<20-64 || !bytes.HasSuffix(whole.bytes(), []byte("OTEL_SERVICE_NAME=big\x00")) {
		t.Fatalf("read %d bytes", n)
	}
	var capped collector
	_, err := NewReader("/proc", time.Minute, 0, 1<<20).Read(pid, capped.consume)
	if !errors.Is(err, ErrTooLarge) || len(capped.bytes()) != 1<<20 {
		t.Fatalf("capped read: %v, %d bytes", err, len(capped.bytes()))
	}
}

func TestReadGone(t *testing.T) {
	cmd := exec.Command(testenv.RequireTool(t, "true"))
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewReader("/proc", 0, 0, 0).Read(cmd.Process.Pid, func([]byte) { t.Error("consumed a gone process's environ") }); err == nil {
		t.Fatal("read of an exited process succeeded")
	}
}

// TestReadEnvironmentOverFUSE: a process that points its environment at a
// page of a FUSE file that does not answer: the kernel copies environments
// from anonymous memory only, so the read ends at once with nothing (no
// FUSE request, no hang).
func TestReadEnvironmentOverFUSE(t *testing.T) {
	testenv.RequireRoot(t)
	fs := testfuse.Mount(t, bytes.Repeat([]byte{'F'}, os.Getpagesize()))
	pid := helper(t, "file", fs.Path())
	var c collector
	if _, err := NewReader("/proc", time.Minute, 1, 0).Read(pid, c.consume); err != nil || len(c.bytes()) != 0 {
		t.Fatalf("read: %v, %d bytes", err, len(c.bytes()))
	}
	if n := len(fs.ReadsBy(pid)) + fs.Pending(); n != 0 {
		t.Fatalf("%d FUSE reads for the environment", n)
	}
}

// TestReadBlocked: a read that blocks (here the environ file of a proc
// tree is a FUSE file that does not answer, as a real environ read blocks
// behind the target's mmap lock) times out; the abandoned read is counted,
// refuses further reads past the cap, and ends when the read is answered.
func TestReadBlocked(t *testing.T) {
	testenv.RequireRoot(t)
	fs := testfuse.Mount(t, []byte("OTEL_SERVICE_NAME=blocked\x00"))
	root := t.TempDir()
	self := os.Getpid()
	dir := filepath.Join(root, strconv.Itoa(self))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stat"), stat, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fs.Path(), filepath.Join(dir, "environ")); err != nil {
		t.Fatal(err)
	}

	r := NewReader(root, 50*time.Millisecond, 1, 0)
	var c collector
	if _, err := r.Read(self, c.consume); !errors.Is(err, ErrTimeout) {
		t.Fatalf("blocked read: %v, want ErrTimeout", err)
	}
	if r.Abandoned() != 1 {
		t.Fatalf("abandoned %d, want 1", r.Abandoned())
	}
	if _, err := r.Read(self, func([]byte) {}); !errors.Is(err, ErrBusy) {
		t.Fatalf("read past the cap of abandoned reads: %v, want ErrBusy", err)
	}
	fs.Release()
	testenv.Eventually(t, "the abandoned read ends once answered", func() bool { return r.Abandoned() == 0 })
	var o collector
	if _, err := r.Read(self, o.consume); err != nil || string(o.bytes()) != "OTEL_SERVICE_NAME=blocked\x00" {
		t.Fatalf("read after release: %v %q", err, o.bytes())
	}
}

// TestLateWorkerIsNotATimeout: a read whose goroutine is late for this
// host's reasons (asleep or runnable before it begins: a busy host, a
// throttled container) is waited for past the deadline, as a late read of
// a process's memory is (remote.Await); only a wait once it has begun is a
// timeout, and it has the whole deadline from then (the delays end as a
// deadline does: a read begun just before is not cut short). The wait
// before it begins has a bound too: remote.MaxReadWaits deadlines.
func TestLateWorkerIsNotATimeout(t *testing.T) {
	const timeout = DefaultTimeout
	pid := sleeper(t, []string{"OTEL_SERVICE_NAME=late"})
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
		{"asleep before the open", sleep(4 * timeout), false},
		{"runnable before the open", spin(4 * timeout), false},
		{"late past the bound", sleep(2 * remote.MaxReadWaits * timeout), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader("/proc", timeout, 1, 0)
			beforeOpen = tc.delay
			defer func() { beforeOpen = nil }()
			var c collector
			_, err := r.Read(pid, c.consume)
			if tc.timeout {
				if !errors.Is(err, ErrTimeout) || r.Abandoned() != 1 {
					t.Fatalf("read: %v, %d abandoned; want ErrTimeout after %d deadlines", err, r.Abandoned(), remote.MaxReadWaits)
				}
				// Also orders the goroutine's use of beforeOpen before its reset.
				testenv.Eventually(t, "the late read ended", func() bool { return r.Abandoned() == 0 })
				return
			}
			if err != nil || string(c.bytes()) != "OTEL_SERVICE_NAME=late\x00" {
				t.Fatalf("read: %v, %q; a late goroutine was taken for a blocked read", err, c.bytes())
			}
		})
	}
}

// TestOneUserCannotTakeEverySlot: processes of one user whose environment
// reads block (FUSE files that do not answer) hold at most
// MaxAbandonedPerUser of the reader's slots, a process whose read is still
// blocked is not read again, and another user's process is still read.
func TestOneUserCannotTakeEverySlot(t *testing.T) {
	testenv.RequireRoot(t)
	fs := testfuse.Mount(t, []byte("OTEL_SERVICE_NAME=blocked\x00"))
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	// Fake processes under a proc root, of the real UID their status says.
	proc := func(pid, uid int) int {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), stat, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(fs.Path(), filepath.Join(dir, "environ")); err != nil {
			t.Fatal(err)
		}
		status := fmt.Sprintf("Name:\tfake\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t%d\t%d\t%d\t%d\n", uid, uid, uid, uid)
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	a, b, c := proc(4000001, 1000), proc(4000002, 1000), proc(4000003, 1000)
	other := proc(4000004, 1001)

	r := NewReader(root, 200*time.Millisecond, DefaultMaxAbandoned, 0)
	read := func(pid int) error { _, err := r.Read(pid, func([]byte) {}); return err }
	if err := read(a); !errors.Is(err, ErrTimeout) {
		t.Fatalf("first blocked read: %v, want ErrTimeout", err)
	}
	if err := read(a); !errors.Is(err, ErrBusy) {
		t.Fatalf("the same process again while its read is blocked: %v, want ErrBusy", err)
	}
	if err := read(b); !errors.Is(err, ErrTimeout) {
		t.Fatalf("the user's second process: %v, want ErrTimeout", err)
	}
	if err := read(c); !errors.Is(err, ErrBusy) {
		t.Fatalf("the user's third process past its %d slots: %v, want ErrBusy", MaxAbandonedPerUser, err)
	}
	if err := read(other); !errors.Is(err, ErrTimeout) {
		t.Fatalf("another user's process: %v, want ErrTimeout (read, not refused)", err)
	}
	if r.Abandoned() != 3 {
		t.Fatalf("abandoned %d, want 3", r.Abandoned())
	}
	fs.Release()
	testenv.Eventually(t, "the abandoned reads end once answered", func() bool { return r.Abandoned() == 0 })
	if err := read(c); err != nil {
		t.Fatalf("the user's third process once the reads ended: %v", err)
	}
}

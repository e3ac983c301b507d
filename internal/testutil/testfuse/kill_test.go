// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testfuse_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testfuse"
)

// holdEnv makes TestHoldReadUntilKilled run: it is the child of
// TestKilledHolderFreesEverything.
const holdEnv = "OTELCTX_TESTFUSE_HOLD"

// killWait bounds the wait for a killed child to be gone: generous, for a
// loaded 2-core host; the watchdog takes milliseconds.
const killWait = 30 * time.Second

// TestHoldReadUntilKilled mounts the file system, has one of its own
// threads fault in a page of the file, says so on standard output, and
// waits until standard input ends: the process a kill would leave stuck
// without the watchdog. Without holdEnv it does nothing.
func TestHoldReadUntilKilled(t *testing.T) {
	if os.Getenv(holdEnv) == "" {
		return // only TestKilledHolderFreesEverything's child runs it
	}
	fs := testfuse.Mount(t, content())
	m := fs.MapUntouched()
	faulted := make(chan byte, 1)
	go func() { faulted <- m[4096] }() // waits in the page fault until Release or Close
	r := received(t, fs)
	fmt.Printf("held conn=%d tid=%d dir=%s\n", fs.Connection(), r.TID, fs.Dir())
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// A test binary killed while one of its own threads waits for a READ its
// own server holds exits: its watchdog aborts the connection, and the
// mount is gone with it.
func TestKilledHolderFreesEverything(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestHoldReadUntilKilled$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), holdEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	conn, tid, dir, out := heldLine(t, stdout)
	waited := make(chan struct{}) // closed once the child is reaped
	go func() {
		_, _ = io.Copy(io.Discard, stdout) // before Wait, which closes the pipe
		_ = cmd.Wait()
		close(waited)
	}()
	if dir == "" {
		<-waited
		if strings.Contains(out, "--- SKIP") { // testenv.Missing in the child
			testenv.Missing(t, "the child could not hold a READ:\n"+out)
		}
		t.Fatalf("the child never held a READ:\n%s", out)
	}
	// If the watchdog fails, free the child here: one failure must not
	// leave a process that no later run can end.
	t.Cleanup(func() {
		if exists(connectionDir(conn)) {
			t.Logf("cleanup: aborting connection %d", conn)
			_ = testfuse.Abort(conn)
		}
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		select {
		case <-waited:
		case <-time.After(testenv.Scaled(killWait)):
			t.Errorf("the child is still there %v after its connection was aborted", testenv.Scaled(killWait))
		}
	})
	if st := threadState(cmd.Process.Pid, tid); st == "" {
		t.Fatalf("the child's faulting thread %d is gone before the kill", tid)
	}

	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waited:
	case <-time.After(testenv.Scaled(killWait)):
		t.Fatalf("the killed child is still there after %v; its faulting thread %d is in state %q",
			testenv.Scaled(killWait), tid, threadState(cmd.Process.Pid, tid))
	}
	gone := time.Since(killed)
	testenv.EventuallyWithin(t, killWait, "the child's connection and mount to be gone", func() bool {
		return !exists(connectionDir(conn)) && !mounted(t, dir)
	})
	t.Logf("the killed child was gone %v after SIGKILL; connection %d and the mount at %s gone %v after it",
		gone.Round(time.Millisecond), conn, dir, time.Since(killed).Round(time.Millisecond))
}

// heldLine reads the child's output until its held line, or its end.
func heldLine(t *testing.T, stdout io.Reader) (conn uint32, tid int, dir, out string) {
	t.Helper()
	sc := bufio.NewScanner(stdout)
	var all strings.Builder
	for sc.Scan() {
		all.WriteString(sc.Text() + "\n")
		if _, err := fmt.Sscanf(sc.Text(), "held conn=%d tid=%d dir=%s", &conn, &tid, &dir); err == nil {
			return conn, tid, dir, ""
		}
	}
	return 0, 0, "", all.String()
}

func connectionDir(conn uint32) string {
	return testfuse.ConnectionsDir + "/" + strconv.FormatUint(uint64(conn), 10)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// mounted reports whether dir is a mount point in this mount namespace.
func mounted(t *testing.T, dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// threadState is the state letter of thread tid of pid ("" once it is
// gone), from its stat file, which takes no lock of its address space.
func threadState(pid, tid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return ""
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	if !ok || rest == "" {
		return ""
	}
	return rest[:1]
}

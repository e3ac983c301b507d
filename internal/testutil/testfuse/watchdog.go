// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testfuse

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A thread of the test process that faults in a page of its own file waits
// uninterruptibly for the READ; once the process is killed, nothing in it
// answers or closes the device again, so it can never exit. The watchdog is
// the test binary run again as a second process, which aborts the test's
// connections through fusectl as soon as the test process is dying: it is
// told so by its parent-death signal, sent when the locked thread that
// started it exits, a thread that runs nothing else and so never waits on a
// page.

// watchdogEnv, set in the watchdog's environment, makes the test binary the
// watchdog (see init).
const watchdogEnv = "OTELCTX_TESTFUSE_WATCHDOG"

// watchdogSignal is the watchdog's parent-death signal.
const watchdogSignal = unix.SIGUSR2

// ConnectionsDir is where fusectl lists the connections; writing to a
// connection's abort file fails every request it holds.
const ConnectionsDir = "/sys/fs/fuse/connections"

func init() {
	if os.Getenv(watchdogEnv) == "" {
		return
	}
	if err := runWatchdog(); err != nil {
		fmt.Fprintf(os.Stderr, "testfuse watchdog: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// watchdog is the test process's side: the pipe on which it announces its
// connections.
type watchdog struct {
	mu  sync.Mutex
	out *os.File
}

var (
	theWatchdog     *watchdog
	theWatchdogErr  error
	theWatchdogOnce sync.Once
)

// getWatchdog starts the process's watchdog at the first mount.
func getWatchdog() (*watchdog, error) {
	theWatchdogOnce.Do(func() {
		ch := make(chan error)
		w := &watchdog{}
		go w.start(ch)
		theWatchdogErr = <-ch
		if theWatchdogErr == nil {
			theWatchdog = w
		}
	})
	return theWatchdog, theWatchdogErr
}

// start runs on its own locked thread for the rest of the process: the
// watchdog's parent-death signal comes when this thread exits, which it
// does only with the process.
func (w *watchdog) start(result chan<- error) {
	runtime.LockOSThread()
	err := w.spawn()
	result <- err
	if err != nil {
		return // the thread exits with the goroutine; nothing depends on it
	}
	holdThread()
}

// holdThread blocks forever (testenv.FUSEWatchdogGoroutine: goleak
// ignores it).
//
//go:noinline
func holdThread() { select {} }

func (w *watchdog) spawn() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		return err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		cmdR.Close()
		cmdW.Close()
		return err
	}
	defer readyR.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), watchdogEnv+"=1")
	cmd.Stdin = cmdR
	cmd.Stdout = readyW
	cmd.Stderr = os.Stderr
	// Its own process group: a Ctrl-C or a kill of the test's group must
	// not end it before the test, whose death is its cue.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: watchdogSignal, Setpgid: true}
	err = cmd.Start()
	cmdR.Close()
	readyW.Close()
	if err != nil {
		cmdW.Close()
		return fmt.Errorf("start the watchdog %s: %w", exe, err)
	}
	line, err := bufio.NewReader(readyR).ReadString('\n')
	if err != nil || line != "ready\n" {
		cmdW.Close()
		_ = cmd.Process.Kill()
		return fmt.Errorf("the watchdog did not start (%q, %v)", line, err)
	}
	w.out = cmdW
	return nil
}

// guard has the watchdog abort the connection conn, mounted at dir, if the
// test process dies before unguard.
func (w *watchdog) guard(conn uint32, dir string) error {
	return w.send(fmt.Sprintf("guard %d %s\n", conn, dir))
}

// unguard: the connection is gone (or no longer the watchdog's to abort:
// its number may be given to another mount).
func (w *watchdog) unguard(conn uint32) error {
	return w.send(fmt.Sprintf("unguard %d\n", conn))
}

func (w *watchdog) send(s string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.out.WriteString(s); err != nil {
		return fmt.Errorf("the watchdog is gone: %w", err)
	}
	return nil
}

// runWatchdog is the watchdog process: it reads guard and unguard lines
// from standard input until its parent-death signal, then aborts and
// unmounts what is still guarded. End of input means the test process has
// exited and closed every descriptor, its devices included: nothing is left
// to abort.
func runWatchdog() error {
	for _, s := range []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT} {
		signal.Ignore(s)
	}
	died := make(chan os.Signal, 1)
	signal.Notify(died, watchdogSignal)
	if err := unix.SetNonblock(0, true); err != nil {
		return err
	}
	wake, err := selfPipe(died)
	if err != nil {
		return err
	}
	if _, err := os.Stdout.WriteString("ready\n"); err != nil {
		return err
	}
	os.Stdout.Close()

	guarded := map[uint32]string{}
	var pending []byte
	for {
		fds := []unix.PollFd{{Fd: 0, Events: unix.POLLIN}, {Fd: int32(wake), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
		// Read what the parent wrote before it died first: an unguard
		// must never be missed.
		eof, err := readLines(&pending, guarded)
		if err != nil {
			return err
		}
		if eof {
			return nil
		}
		if fds[1].Revents != 0 {
			abortAll(guarded)
			return nil
		}
	}
}

// selfPipe returns a descriptor that becomes readable when sig arrives.
func selfPipe(sig <-chan os.Signal) (int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return 0, err
	}
	go func() {
		<-sig
		_, _ = unix.Write(p[1], []byte{1})
	}()
	return p[0], nil
}

// readLines reads everything standard input holds now and applies each
// complete line to guarded.
func readLines(pending *[]byte, guarded map[uint32]string) (eof bool, err error) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(0, buf)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return false, nil
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return false, err
		case n == 0:
			return true, nil
		}
		*pending = append(*pending, buf[:n]...)
		for {
			line, rest, ok := strings.Cut(string(*pending), "\n")
			if !ok {
				break
			}
			*pending = []byte(rest)
			applyLine(line, guarded)
		}
	}
}

func applyLine(line string, guarded map[uint32]string) {
	verb, args, _ := strings.Cut(line, " ")
	num, dir, _ := strings.Cut(args, " ")
	conn, err := strconv.ParseUint(num, 10, 32)
	if err != nil {
		return
	}
	switch verb {
	case "guard":
		guarded[uint32(conn)] = dir
	case "unguard":
		delete(guarded, uint32(conn))
	}
}

func abortAll(guarded map[uint32]string) {
	for conn, dir := range guarded {
		if err := Abort(conn); err != nil {
			fmt.Fprintf(os.Stderr, "testfuse watchdog: abort connection %d (%s): %v\n", conn, dir, err)
		} else {
			fmt.Fprintf(os.Stderr, "testfuse watchdog: the test process died: aborted FUSE connection %d (%s)\n", conn, dir)
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH); err == nil {
			_ = os.Remove(dir)
		}
	}
}

// Abort aborts the FUSE connection conn through fusectl: every request it
// holds fails, and a thread waiting for one is free. A connection that is
// already gone is not an error.
func Abort(conn uint32) error {
	err := os.WriteFile(connectionFile(conn, "abort"), []byte("1"), 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func connectionFile(conn uint32, name string) string {
	return ConnectionsDir + "/" + strconv.FormatUint(uint64(conn), 10) + "/" + name
}

// connectionOf returns the connection number of the FUSE mount at dir: its
// device number (an anonymous device, major 0).
func connectionOf(dir string) (uint32, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, err
	}
	if unix.Major(st.Dev) != 0 {
		return 0, fmt.Errorf("%s: device %d:%d is not a FUSE connection's", dir, unix.Major(st.Dev), unix.Minor(st.Dev))
	}
	return unix.Minor(st.Dev), nil
}

// requireAbortFile makes sure the connection's abort file exists, mounting
// fusectl where it is not (a fresh machine may not have it mounted).
func requireAbortFile(conn uint32) error {
	abort := connectionFile(conn, "abort")
	if _, err := os.Stat(abort); err == nil {
		return nil
	}
	if err := unix.Mount("fusectl", ConnectionsDir, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("mount fusectl on %s: %w", ConnectionsDir, err)
	}
	if _, err := os.Stat(abort); err != nil {
		return fmt.Errorf("fusectl is mounted but %w", err)
	}
	return nil
}

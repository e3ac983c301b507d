// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ptrace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// threadStatus reads State and TracerPid from /proc/TID/status (0 when gone).
func threadStatus(tid int) (state byte, tracer int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("State:")); ok {
			if v = bytes.TrimSpace(v); len(v) > 0 {
				state = v[0]
			}
		} else if v, ok := bytes.CutPrefix(line, []byte("TracerPid:")); ok {
			tracer, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	return state, tracer
}

// exiting: the thread is gone, a zombie, or has SIGKILL pending (its
// process is being killed), so it will not stop.
func exiting(tid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH)
	}
	const sigkill = 1 << (unix.SIGKILL - 1)
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("State:")); ok {
			if v = bytes.TrimSpace(v); len(v) > 0 && (v[0] == 'Z' || v[0] == 'X') {
				return true
			}
			continue
		}
		for _, key := range [][]byte{[]byte("SigPnd:"), []byte("ShdPnd:")} {
			if v, ok := bytes.CutPrefix(line, key); ok {
				if mask, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 16, 64); err == nil && mask&sigkill != 0 {
					return true
				}
			}
		}
	}
	return false
}

// waitStop polls with WNOHANG (a blocking wait4 cannot be bounded), yielding
// first: a stop takes microseconds and the target may need this core.
// PTRACE_GETSIGINFO catches a stop whose status the parent's wait consumed.
func waitStop(tid int, timeout time.Duration) (unix.WaitStatus, error) {
	deadline := time.Now().Add(timeout)
	pause := time.Duration(0)
	for i := 0; ; i++ {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(tid, &ws, unix.WALL|unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			return 0, ErrExited
		case err != nil:
			return 0, fmt.Errorf("wait4: %w", err)
		case wpid == tid && ws.Stopped():
			return ws, nil
		case wpid == tid && (ws.Exited() || ws.Signaled()):
			return 0, ErrExited
		}
		if i >= 4 {
			if ws, ok := stoppedBySiginfo(tid); ok {
				return ws, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, ErrTimeout
		}
		if i < 20 {
			_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			continue
		}
		pause = min(max(pause*2, 10*time.Microsecond), time.Millisecond)
		time.Sleep(pause)
	}
}

func stoppedBySiginfo(tid int) (unix.WaitStatus, bool) {
	// siginfo_t starts with si_signo, si_errno, si_code (int32 each).
	var si [128]byte
	if ptracePtr(unix.PTRACE_GETSIGINFO, tid, 0, unsafe.Pointer(&si[0])) != nil {
		return 0, false
	}
	signo := int32(binary.NativeEndian.Uint32(si[0:]))
	code := int32(binary.NativeEndian.Uint32(si[8:]))
	if code>>8 == unix.PTRACE_EVENT_STOP {
		// ptrace_do_notify: si_code = signal | PTRACE_EVENT_STOP<<8.
		return unix.WaitStatus(0x7f | int(code&0xff)<<8 | unix.PTRACE_EVENT_STOP<<16), true
	}
	return unix.WaitStatus(0x7f | int(signo&0xff)<<8), true
}

// reapExit: a traced thread stays a zombie until its tracer waits; false
// means it is still seized and alive.
func reapExit(tid int, timeout time.Duration, ts *ThreadStats) bool {
	deadline := time.Now().Add(timeout)
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(tid, &ws, unix.WALL|unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD), wpid == tid && (ws.Exited() || ws.Signaled()):
			ts.Err = fmt.Errorf("tid %d: %w", tid, ErrExited)
			return true
		case wpid == tid && ws.Stopped():
			if ptrace(unix.PTRACE_DETACH, tid, 0, 0) == nil {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func waitThreadGone(tid int, timeout time.Duration) {
	path := "/proc/self/task/" + strconv.Itoa(tid)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// ptracePtr converts data to uintptr in the syscall expression, where the
// compiler keeps the object alive and unmoved.
func ptracePtr(req int, tid int, addr uintptr, data unsafe.Pointer) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, uintptr(data), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func ptrace(req int, tid int, addr, data uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, data, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package ptrace stops a process's threads one at a time (PTRACE_SEIZE +
// PTRACE_INTERRUPT), lets the caller read while each is stopped, and never
// leaves one stopped: every path after a seize ends in PTRACE_DETACH or in
// reaping the thread's exit; a panic in the caller is re-raised after the
// detach; a thread that does not stop in time (uninterruptible wait) cannot
// be detached, so its tracer OS thread is thrown away and the kernel detaches
// its tracees (exit_ptrace), as it does when otelctx is killed.
//
// A tracer that is the target's parent (tests) must not wait for the child
// during a snapshot: the parent's wait would take the child's ptrace-stops.
package ptrace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

var ErrAlreadyTraced = errors.New("thread already traced")

var ErrCanceled = errors.New("snapshot canceled before this thread")

var ErrGaveUp = errors.New("gave up on the process after too many stop timeouts")

var ErrTimeout = errors.New("thread did not stop in time")

var ErrExited = errors.New("thread exited")

var ErrProcessGone = errors.New("process gone")

type Stopped struct {
	TID int
	// ThreadPointer is fs_base (x86-64) or TPIDR_EL0 (arm64).
	ThreadPointer uint64
}

type ThreadStats struct {
	TID     int
	Stopped time.Duration // from PTRACE_INTERRUPT to PTRACE_DETACH returning
	Err     error
	// Reinjected: the signal of a signal-delivery-stop, given back on detach.
	Reinjected unix.Signal
}

type Stats struct {
	Threads       []ThreadStats
	AlreadyTraced int
	Exited        int // threads that exited before or while being stopped
	TimedOut      int
	// NotTried: left alone after Options.Done or MaxTimeouts.
	NotTried int
	// LeftOut: threads past Options.MaxThreads, not stopped and not in
	// Threads.
	LeftOut int
}

// Options: zero values take the defaults.
type Options struct {
	ProcRoot string
	// StopTimeout defaults to 100ms.
	StopTimeout time.Duration
	// Done ends the snapshot before the next thread (ErrCanceled).
	Done <-chan struct{}
	// MaxTimeouts: a thread in D state costs StopTimeout plus disposing of its
	// tracer thread (up to a second), so the rest are given up (ErrGaveUp).
	MaxTimeouts int
	// MaxThreads bounds the threads one snapshot stops (and lists): each
	// stop costs the process a pause and the snapshot time, and a process
	// chooses how many threads it has. The first ones listed are taken.
	MaxThreads int
}

const DefaultMaxTimeouts = 3

// DefaultMaxThreads: at ~50-100 µs per stop, a snapshot stays near 0.1 s.
const DefaultMaxThreads = 1024

func (o *Options) setDefaults() {
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 100 * time.Millisecond
	}
	if o.MaxTimeouts <= 0 {
		o.MaxTimeouts = DefaultMaxTimeouts
	}
	if o.MaxThreads <= 0 {
		o.MaxThreads = DefaultMaxThreads
	}
}

func (o *Options) ended(st *Stats) error {
	select {
	case <-o.Done:
		return ErrCanceled
	default:
	}
	if st.TimedOut >= o.MaxTimeouts {
		return ErrGaveUp
	}
	return nil
}

// EachThread calls fn on each thread of pid while it is stopped. fn's error
// goes to that thread's ThreadStats.Err; the error returned is the process's.
func EachThread(pid int, fn func(Stopped) error) (Stats, error) {
	return EachThreadOpts(pid, Options{}, fn)
}

func EachThreadOpts(pid int, opt Options, fn func(Stopped) error) (Stats, error) {
	opt.setDefaults()
	if pid == os.Getpid() {
		// ptrace refuses the tracer's own thread group.
		return Stats{}, fmt.Errorf("pid %d: cannot stop the threads of otelctx itself", pid)
	}
	tids, leftOut, err := listThreads(opt.ProcRoot, pid, opt.MaxThreads)
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Threads: make([]ThreadStats, 0, len(tids)), LeftOut: leftOut}
	for len(tids) > 0 {
		if err := opt.ended(&st); err != nil {
			for _, tid := range tids {
				st.Threads = append(st.Threads, ThreadStats{TID: tid, Err: err})
			}
			st.NotTried += len(tids)
			break
		}
		res := make(chan workerResult, 1)
		go worker(pid, tids, opt, fn, &st, res)
		r := <-res
		tids = tids[r.done:]
		if r.burned != 0 {
			// Wait until the kernel has released what the burned thread seized.
			waitThreadGone(r.burned, opt.StopTimeout+time.Second)
		}
		if r.panicked {
			panic(r.panicVal)
		}
	}
	return st, nil
}

// ErrTooManyThreads: a process has more threads than ListThreads lists.
var ErrTooManyThreads = errors.New("too many threads to list")

// maxListedThreads bounds what one process's thread count can make
// ListThreads hold (64k TIDs, 512 KiB); a variable so tests can lower it.
var maxListedThreads = 1 << 16

// ListThreads lists every thread of pid, or fails with ErrTooManyThreads:
// its callers need the whole list (who may write which slot), not a part.
func ListThreads(procRoot string, pid int) ([]int, error) {
	tids, more, err := listThreads(procRoot, pid, maxListedThreads)
	if err == nil && more > 0 {
		return nil, fmt.Errorf("pid %d: %d threads, over %d: %w", pid, len(tids)+more, maxListedThreads, ErrTooManyThreads)
	}
	return tids, err
}

// listThreads returns the first limit threads of pid and how many more there
// are, holding at most limit TIDs and one directory chunk of names.
func listThreads(procRoot string, pid, limit int) (tids []int, more int, err error) {
	f, err := os.Open(procRoot + "/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, 0, fmt.Errorf("pid %d: %w", pid, ErrProcessGone)
		}
		return nil, 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	defer f.Close()
	for {
		names, err := f.Readdirnames(256)
		for _, n := range names {
			if tid, err := strconv.Atoi(n); err == nil {
				if len(tids) < limit {
					tids = append(tids, tid)
				} else {
					more++
				}
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, fmt.Errorf("pid %d: listing threads: %w", pid, err)
		}
	}
	if len(tids) == 0 {
		return nil, 0, fmt.Errorf("pid %d: no threads: %w", pid, ErrProcessGone)
	}
	return tids, more, nil
}

type workerResult struct {
	done     int // tids handled (including the one that burned the thread)
	burned   int // tid of the tracer thread being terminated, 0 if none
	panicked bool
	panicVal any
}

// worker runs on one locked OS thread: every ptrace request must come from
// the thread that seized the tracee.
func worker(pid int, tids []int, opt Options, fn func(Stopped) error, st *Stats, out chan<- workerResult) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The runtime never terminates the main thread (it wedges it), so it
		// cannot be thrown away: hand over to another thread.
		inner := make(chan workerResult, 1)
		go worker(pid, tids, opt, fn, st, inner)
		r := <-inner
		runtime.UnlockOSThread()
		out <- r
		return
	}
	var r workerResult
	defer func() {
		if r.burned == 0 {
			runtime.UnlockOSThread()
		}
		// Returning while locked with burned set terminates this thread.
		out <- r
	}()
	for i, tid := range tids {
		if opt.ended(st) != nil {
			return // EachThreadOpts reports the rest
		}
		ts, o := stopOne(pid, tid, opt, fn)
		r.done = i + 1
		switch {
		case errors.Is(ts.Err, ErrAlreadyTraced):
			st.AlreadyTraced++
		case errors.Is(ts.Err, ErrExited):
			st.Exited++
		case errors.Is(ts.Err, ErrTimeout):
			st.TimedOut++
		}
		st.Threads = append(st.Threads, ts)
		if o.panicked {
			r.panicked, r.panicVal = true, o.panicVal
		}
		if o.burn {
			r.burned = unix.Gettid()
			return
		}
		if o.panicked {
			return
		}
	}
}

type outcome struct {
	burn     bool // the thread is still seized and cannot be detached
	panicked bool
	panicVal any
}

var testHookAfterSeize func(tid int)

func stopOne(pid, tid int, opt Options, fn func(Stopped) error) (ts ThreadStats, o outcome) {
	timeout := opt.StopTimeout
	ts.TID = tid
	if err := ptrace(unix.PTRACE_SEIZE, tid, 0, 0); err != nil {
		ts.Err = seizeError(tid, err)
		return ts, o
	}
	if testHookAfterSeize != nil {
		testHookAfterSeize(tid)
	}
	start := time.Now()
	defer func() { ts.Stopped = time.Since(start) }()
	if err := ptrace(unix.PTRACE_INTERRUPT, tid, 0, 0); err != nil {
		// ESRCH: the thread died (a seized live thread does not give it).
		ts.Err = fmt.Errorf("tid %d: PTRACE_INTERRUPT: %w", tid, err)
		o.burn = !reapExit(tid, timeout, &ts)
		return ts, o
	}
	ws, err := waitStop(tid, timeout)
	switch {
	case errors.Is(err, ErrExited):
		ts.Err = fmt.Errorf("tid %d: %w", tid, ErrExited)
		return ts, o
	case errors.Is(err, ErrTimeout) && exiting(tid):
		// Its process is being killed: it ends instead of stopping, later
		// than the timeout on a busy host.
		ts.Err = fmt.Errorf("tid %d: killed before it stopped: %w", tid, ErrExited)
		o.burn = !reapExit(tid, timeout, &ts)
		return ts, o
	case err != nil:
		ts.Err = fmt.Errorf("tid %d: %w", tid, err)
		o.burn = true
		return ts, o
	}
	var sig unix.Signal
	if ws>>16 == 0 {
		// A signal-delivery-stop: the signal must be given back on detach.
		sig = ws.StopSignal()
	}
	tp, err := threadPointer(tid)
	switch {
	case !belongs(opt.ProcRoot, pid, tid):
		// The TID was reused by another process before the seize: not ours.
		ts.Err = fmt.Errorf("tid %d: no longer a thread of pid %d: %w", tid, pid, ErrExited)
	case err != nil:
		ts.Err = fmt.Errorf("tid %d: reading the thread pointer: %w", tid, err)
	default:
		o.panicked, o.panicVal, ts.Err = call(fn, Stopped{TID: tid, ThreadPointer: tp})
	}
	if err := ptrace(unix.PTRACE_DETACH, tid, 0, uintptr(sig)); err != nil {
		// ESRCH on a thread seen stopped: SIGKILLed meanwhile, ours to reap.
		switch {
		case ts.Err == nil && errors.Is(err, unix.ESRCH):
			ts.Err = fmt.Errorf("tid %d: PTRACE_DETACH: %v: %w", tid, err, ErrExited)
		case ts.Err == nil:
			ts.Err = fmt.Errorf("tid %d: PTRACE_DETACH: %w", tid, err)
		}
		o.burn = !reapExit(tid, timeout, &ts)
		return ts, o
	}
	ts.Reinjected = sig
	return ts, o
}

// belongs: a stopped thread cannot exit and hand its TID on, so the check
// holds until the detach.
func belongs(procRoot string, pid, tid int) bool {
	_, err := os.Stat(procRoot + "/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid))
	return err == nil
}

// call recovers a panic so the thread is detached first.
func call(fn func(Stopped) error, s Stopped) (panicked bool, v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			panicked, v = true, r
			err = fmt.Errorf("tid %d: panic while stopped: %v", s.TID, r)
		}
	}()
	return false, nil, fn(s)
}

func seizeError(tid int, err error) error {
	switch {
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("tid %d: %w", tid, ErrExited)
	case errors.Is(err, unix.EPERM):
		// EPERM is also what an already traced thread or a zombie gets.
		state, tracer := threadStatus(tid)
		switch {
		case tracer != 0:
			return fmt.Errorf("tid %d: traced by pid %d: %w", tid, tracer, ErrAlreadyTraced)
		case state == 'Z' || state == 'X' || state == 0:
			return fmt.Errorf("tid %d: %w", tid, ErrExited)
		}
	}
	return fmt.Errorf("tid %d: PTRACE_SEIZE: %w", tid, err)
}

// Package ptrace stops the threads of a process one at a time with
// PTRACE_SEIZE + PTRACE_INTERRUPT, lets the caller read while the thread is
// stopped, and always detaches.
//
// A thread is never left stopped:
//   - every path after a successful PTRACE_SEIZE ends in PTRACE_DETACH, or in
//     reaping the thread's exit status when it died while seized;
//   - a panic in the caller's function is recovered, the thread detached,
//     and the panic re-raised in the caller's goroutine;
//   - when a thread does not reach its stop within the timeout (it sits in
//     an uninterruptible wait, e.g. a vfork parent), PTRACE_DETACH cannot be
//     used (it needs a stopped tracee). The tracer OS thread is then thrown
//     away: its goroutine returns while still locked to it, the Go runtime
//     terminates the thread, and the kernel detaches every tracee of an
//     exiting tracer (exit_ptrace), which also drops the pending interrupt.
//     EachThread waits for that thread to be gone before it returns;
//   - when the whole otelctx process is killed, the same kernel rule applies.
//
// A tracer that is also the target's parent (tests) must not wait for the
// child during a snapshot: the kernel reports a traced child's stops to any
// wait of its parent, so os/exec's Wait would take a ptrace-stop for the
// child's end. A collector is never its targets' parent.
package ptrace

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// ErrAlreadyTraced: another tracer (a debugger, another profiler) owns the thread.
var ErrAlreadyTraced = errors.New("thread already traced")

// ErrCanceled: Options.Done was closed before the thread was visited.
var ErrCanceled = errors.New("snapshot canceled before this thread")

// ErrGaveUp: Options.MaxTimeouts threads of the process had timed out
// before this one was visited.
var ErrGaveUp = errors.New("gave up on the process after too many stop timeouts")

// ErrTimeout: the thread did not reach a ptrace-stop within Options.StopTimeout.
var ErrTimeout = errors.New("thread did not stop in time")

// ErrExited: the thread exited before or while it was being stopped.
var ErrExited = errors.New("thread exited")

// ErrProcessGone: the process does not exist (any more).
var ErrProcessGone = errors.New("process gone")

// Stopped is a thread in ptrace-stop.
type Stopped struct {
	TID int
	// ThreadPointer is fs_base (x86-64) or TPIDR_EL0 (arm64).
	ThreadPointer uint64
}

// ThreadStats describes one thread's stop.
type ThreadStats struct {
	TID     int
	Stopped time.Duration // from PTRACE_INTERRUPT to PTRACE_DETACH returning
	Err     error
	// Reinjected is the signal passed back with PTRACE_DETACH when the stop
	// we waited for was a signal-delivery-stop (0 otherwise).
	Reinjected unix.Signal
}

// Stats of one snapshot.
type Stats struct {
	Threads       []ThreadStats
	AlreadyTraced int
	Exited        int // threads that exited before or while being stopped
	// TimedOut counts threads that did not stop within the timeout.
	TimedOut int
	// NotTried counts threads left alone because the snapshot was canceled
	// (Options.Done) or gave up (Options.MaxTimeouts).
	NotTried int
}

// Options tune EachThreadOpts. Zero values take the defaults.
type Options struct {
	// ProcRoot is the procfs mount, default "/proc".
	ProcRoot string
	// StopTimeout bounds the wait for one thread's stop (default 100ms).
	StopTimeout time.Duration
	// Done, when closed, ends the snapshot before the next thread: the
	// threads not visited yet get ErrCanceled (a thread already stopped is
	// detached first, as always).
	Done <-chan struct{}
	// MaxTimeouts is how many threads of the process may time out before
	// the rest are given up (ErrGaveUp), default 3. A thread that cannot
	// stop (uninterruptible sleep: D state) costs StopTimeout plus the
	// disposal of the tracer thread that seized it (up to a second), so a
	// process with many such threads would hold the reader for that long
	// per thread.
	MaxTimeouts int
}

// DefaultMaxTimeouts is Options.MaxTimeouts' default.
const DefaultMaxTimeouts = 3

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
}

// ended says why the snapshot stops before the next thread: ErrCanceled,
// ErrGaveUp, or nil to go on.
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

// EachThread stops each thread of pid in turn, calls fn while it is stopped,
// and detaches it before stopping the next. A thread is never left stopped.
// An error from fn is recorded in that thread's ThreadStats.Err; the error
// returned is for the process as a whole (gone, own process, unreadable).
func EachThread(pid int, fn func(Stopped) error) (Stats, error) {
	return EachThreadOpts(pid, Options{}, fn)
}

// EachThreadOpts is EachThread with options.
func EachThreadOpts(pid int, opt Options, fn func(Stopped) error) (Stats, error) {
	opt.setDefaults()
	if pid == os.Getpid() {
		// ptrace refuses the tracer's own thread group.
		return Stats{}, fmt.Errorf("pid %d: cannot stop the threads of otelctx itself", pid)
	}
	tids, err := ListThreads(opt.ProcRoot, pid)
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Threads: make([]ThreadStats, 0, len(tids))}
	for len(tids) > 0 {
		if err := opt.ended(&st); err != nil {
			// The threads not visited: none was seized.
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
			// The tracer thread is being terminated to release a thread
			// that could not be detached: wait until the kernel has done so.
			waitThreadGone(r.burned, opt.StopTimeout+time.Second)
		}
		if r.panicked {
			panic(r.panicVal)
		}
	}
	return st, nil
}

// ListThreads returns the thread IDs of pid from <procRoot>/<pid>/task.
func ListThreads(procRoot string, pid int) ([]int, error) {
	f, err := os.Open(procRoot + "/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("pid %d: %w", pid, ErrProcessGone)
		}
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("pid %d: listing threads: %w", pid, err)
	}
	tids := make([]int, 0, len(names))
	for _, n := range names {
		if tid, err := strconv.Atoi(n); err == nil {
			tids = append(tids, tid)
		}
	}
	if len(tids) == 0 {
		return nil, fmt.Errorf("pid %d: no threads: %w", pid, ErrProcessGone)
	}
	return tids, nil
}

type workerResult struct {
	done     int // tids handled (including the one that burned the thread)
	burned   int // tid of the tracer thread being terminated, 0 if none
	panicked bool
	panicVal any
}

// worker handles tids on one locked OS thread: every ptrace request must
// come from the thread that seized the tracee.
func worker(pid int, tids []int, opt Options, fn func(Stopped) error, st *Stats, out chan<- workerResult) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The Go runtime never terminates the main thread (it wedges it
		// instead), so it cannot be thrown away on a timeout. Hand over to
		// another thread: while this goroutine holds the main thread, the
		// new one cannot be scheduled on it.
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
		// With burned set, returning while locked terminates this thread.
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

// testHookAfterSeize runs between PTRACE_SEIZE and PTRACE_INTERRUPT (tests).
var testHookAfterSeize func(tid int)

// stopOne seizes, interrupts and waits for one thread, calls fn, detaches.
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
		// ESRCH: the thread died (a seized thread that is not stopped
		// does not give ESRCH to PTRACE_INTERRUPT).
		ts.Err = fmt.Errorf("tid %d: PTRACE_INTERRUPT: %w", tid, err)
		o.burn = !reapExit(tid, timeout, &ts)
		return ts, o
	}
	ws, err := waitStop(tid, timeout)
	switch {
	case errors.Is(err, ErrExited):
		ts.Err = fmt.Errorf("tid %d: %w", tid, ErrExited)
		return ts, o
	case err != nil:
		ts.Err = fmt.Errorf("tid %d: %w", tid, err)
		o.burn = true
		return ts, o
	}
	var sig unix.Signal
	if ws>>16 == 0 {
		// A signal-delivery-stop, not our PTRACE_EVENT_STOP: the signal
		// was taken from the thread and must be given back on detach.
		sig = ws.StopSignal()
	}
	tp, err := threadPointer(tid)
	switch {
	case !belongs(opt.ProcRoot, pid, tid):
		// The thread listed exited and its TID was reused by another
		// process before the seize: not ours to read (it is stopped now,
		// so it stays until the detach below).
		ts.Err = fmt.Errorf("tid %d: no longer a thread of pid %d: %w", tid, pid, ErrExited)
	case err != nil:
		ts.Err = fmt.Errorf("tid %d: reading the thread pointer: %w", tid, err)
	default:
		o.panicked, o.panicVal, ts.Err = call(fn, Stopped{TID: tid, ThreadPointer: tp})
	}
	if err := ptrace(unix.PTRACE_DETACH, tid, 0, uintptr(sig)); err != nil {
		// ESRCH on a thread we saw stopped: it was SIGKILLed meanwhile;
		// its exit status is ours to reap.
		if ts.Err == nil {
			ts.Err = fmt.Errorf("tid %d: PTRACE_DETACH: %w", tid, err)
		}
		o.burn = !reapExit(tid, timeout, &ts)
		return ts, o
	}
	ts.Reinjected = sig
	return ts, o
}

// belongs reports whether tid is a thread of pid: a stopped thread cannot
// exit and hand its TID on, so once checked while stopped it stays true
// until the detach.
func belongs(procRoot string, pid, tid int) bool {
	_, err := os.Stat(procRoot + "/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid))
	return err == nil
}

// call runs fn, turning a panic into a value so the thread is detached first.
func call(fn func(Stopped) error, s Stopped) (panicked bool, v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			panicked, v = true, r
			err = fmt.Errorf("tid %d: panic while stopped: %v", s.TID, r)
		}
	}()
	return false, nil, fn(s)
}

// seizeError classifies a PTRACE_SEIZE failure.
func seizeError(tid int, err error) error {
	switch {
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("tid %d: %w", tid, ErrExited)
	case errors.Is(err, unix.EPERM):
		// EPERM is also what a thread already traced by someone else, or
		// a zombie (an exited group leader), gets.
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

// Package ptrace stops the threads of a process one at a time with
// PTRACE_SEIZE + PTRACE_INTERRUPT, lets the caller read while the thread is
// stopped, and always detaches.
package ptrace

import (
	"errors"
	"time"
)

// ErrAlreadyTraced: another tracer (a debugger, another profiler) owns the thread.
var ErrAlreadyTraced = errors.New("thread already traced")

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
}

// Stats of one snapshot.
type Stats struct {
	Threads        []ThreadStats
	AlreadyTraced  int
	Exited         int // threads that exited before or while being stopped
}

// EachThread stops each thread of pid in turn, calls fn while it is stopped,
// and detaches it before stopping the next. A thread is never left stopped.
func EachThread(pid int, fn func(Stopped) error) (Stats, error) {
	return Stats{}, errors.New("ptrace.EachThread: not implemented yet")
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package remote

import (
	"sync/atomic"
	"time"
)

// MaxReadWaits bounds the wait for a worker that has not reached its system
// call (a busy or throttled host has not run it yet): at most this many
// timeouts in all before the read counts as hung.
const MaxReadWaits = 10

// epoch is what Entry's times count from (the monotonic clock).
var epoch = time.Now()

// Entry is when a worker began the system call that can block on its
// target; before that a delay is this host's (no CPU for the worker yet),
// after it the target's (its pages can keep the call busy or asleep).
type Entry struct {
	at atomic.Int64 // since epoch; 0: not yet
}

// Enter is called by the worker just before its system call.
func (e *Entry) Enter() { e.at.Store(max(int64(time.Since(epoch)), 1)) }

// Reset readies e for another call.
func (e *Entry) Reset() { e.at.Store(0) }

// Await is the wait for a worker blocked on another process, for every
// reader that has one (process_vm_readv here, /proc/PID/environ in
// internal/scan/envscan): it receives the worker's result from done, or
// gives up (ok false: the caller abandons the worker) once the worker has
// been in its call for timeout. Until the worker enters, the wait is
// extended; timer, armed for timeout, fires MaxReadWaits times at most.
// waits is the number of times it was armed.
func Await[T any](done <-chan T, e *Entry, timer *time.Timer, timeout time.Duration) (v T, waits int, ok bool) {
	for waits = 1; ; waits++ {
		select {
		case v = <-done:
			timer.Stop()
			return v, waits, true
		case <-timer.C:
			if waits >= MaxReadWaits {
				return v, waits, false
			}
			left := timeout // not entered: another whole timeout
			if at := e.at.Load(); at != 0 {
				left = time.Duration(at) + timeout - time.Since(epoch)
				if left <= 0 {
					return v, waits, false
				}
			}
			timer.Reset(left)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package remote

import (
	"sync/atomic"
	"time"
)

// MaxReadWaits: a read whose worker has not reached the system call at the
// timeout (a busy or throttled host has not run it yet) is given up to this
// many timeouts in all before it counts as hung; once in the call, the
// first timeout counts.
const MaxReadWaits = 10

// Await is the wait for a worker blocked on another process, for every
// reader that has one (process_vm_readv here, /proc/PID/environ in
// internal/proc/environ): it receives the worker's result from done, or
// gives up when timer (armed for timeout) fires once the worker has set
// entered, just before its system call: until then a delay is this host's
// (no CPU for the worker yet), not the target's, and the wait is extended by
// whole timeouts, MaxReadWaits in all. waits is the number of timeouts
// begun; ok is false when the caller is to abandon the worker.
func Await[T any](done <-chan T, entered *atomic.Bool, timer *time.Timer, timeout time.Duration) (v T, waits int, ok bool) {
	for waits = 1; ; waits++ {
		select {
		case v = <-done:
			timer.Stop()
			return v, waits, true
		case <-timer.C:
			if waits < MaxReadWaits && !entered.Load() {
				timer.Reset(timeout)
				continue
			}
			return v, waits, false
		}
	}
}

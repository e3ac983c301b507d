// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package pidclock tells, from two readings of where the host's PID
// allocator was, whether a PID seen held may have been handed to another
// process in between, without watching every fork (discovery takes the
// readings: package envscan).
//
// The kernel hands PIDs out cyclically: each new task (process or thread)
// takes the next free PID after the last one allocated, wrapping past
// pid_max to the reserved ones' end. A PID freed at some moment can only
// be taken again once the allocator has gone round to it, which takes at
// least as many new tasks as the way from the last PID allocated to it.
// /proc/stat's "processes" counts the tasks created since boot and
// /proc/loadavg's fifth field is the last PID allocated, so two readings
// bound how far the allocator went between them. A process that may write
// ns_last_pid or use clone3's set_tid (CAP_SYS_ADMIN over the host's PID
// namespace) moves the allocator without new tasks: it can defeat the
// bound, as it can do most things on the host.
package pidclock

// ReservedPIDs is where the allocator starts again past pid_max
// (RESERVED_PIDS in the kernel).
const ReservedPIDs = 300

// Reading is the allocator's position at one moment; OK is false when a
// file could not be read (nothing can then be told from it).
type Reading struct {
	Forks uint64
	Last  int
	OK    bool
}

// NotReached reports whether pid cannot have been allocated between
// reading r and reading now: fewer tasks were created than the
// allocator's shortest way from r.Last to pid.
func (r Reading) NotReached(now Reading, pid, pidMax int) bool {
	if !r.OK || !now.OK || pidMax <= ReservedPIDs || pid <= 0 || pid >= pidMax || now.Forks < r.Forks {
		return false
	}
	way := pid - r.Last // past r.Last: straight there
	if pid <= r.Last {
		// Round past pid_max, then up from the reserved PIDs' end (less
		// than pidMax - r.Last + pid: the shorter, so the safer).
		way = pidMax - r.Last + max(pid-ReservedPIDs, 0)
	}
	return now.Forks-r.Forks < uint64(max(way, 0))
}

// WithinCycle reports whether fewer tasks were created between r and now
// than one full round of the allocator: a PID was handed out at most
// once in between.
func (r Reading) WithinCycle(now Reading, pidMax int) bool {
	if !r.OK || !now.OK || pidMax <= ReservedPIDs || now.Forks < r.Forks {
		return false
	}
	return now.Forks-r.Forks < uint64(pidMax-ReservedPIDs)
}

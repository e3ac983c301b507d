// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package pidclock reads where the host's PID allocator is, so that a
// reader can tell whether a PID it saw held may have been handed to
// another process since, without watching every fork.
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

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// reservedPIDs is where the allocator starts again past pid_max
// (RESERVED_PIDS in the kernel).
const reservedPIDs = 300

// Reading is the allocator's position at one moment; OK is false when a
// file could not be read (nothing can then be told from it).
type Reading struct {
	Forks uint64
	Last  int
	OK    bool
}

// Read reads the forks count first, then the last PID: between the two,
// new tasks move the last PID on, so the reading errs on the side of more
// tasks (a conservative bound).
func Read(procRoot string) Reading {
	if procRoot == "" {
		procRoot = "/proc"
	}
	forks, ok := statProcesses(filepath.Join(procRoot, "stat"))
	if !ok {
		return Reading{}
	}
	last, ok := loadavgLast(filepath.Join(procRoot, "loadavg"))
	if !ok {
		return Reading{}
	}
	return Reading{Forks: forks, Last: last, OK: true}
}

// PIDMax is /proc/sys/kernel/pid_max, 0 when unreadable.
func PIDMax(procRoot string) int {
	if procRoot == "" {
		procRoot = "/proc"
	}
	b, err := os.ReadFile(filepath.Join(procRoot, "sys/kernel/pid_max"))
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil || n <= reservedPIDs {
		return 0
	}
	return n
}

// NotReached reports whether pid cannot have been allocated between
// reading r and reading now: fewer tasks were created than the
// allocator's shortest way from r.Last to pid.
func (r Reading) NotReached(now Reading, pid, pidMax int) bool {
	if !r.OK || !now.OK || pidMax <= reservedPIDs || pid <= 0 || pid >= pidMax || now.Forks < r.Forks {
		return false
	}
	way := pid - r.Last // past r.Last: straight there
	if pid <= r.Last {
		// Round past pid_max, then up from the reserved PIDs' end (less
		// than pidMax - r.Last + pid: the shorter, so the safer).
		way = pidMax - r.Last + max(pid-reservedPIDs, 0)
	}
	return now.Forks-r.Forks < uint64(max(way, 0))
}

// WithinCycle reports whether fewer tasks were created between r and now
// than one full round of the allocator: a PID was handed out at most
// once in between.
func (r Reading) WithinCycle(now Reading, pidMax int) bool {
	if !r.OK || !now.OK || pidMax <= reservedPIDs || now.Forks < r.Forks {
		return false
	}
	return now.Forks-r.Forks < uint64(pidMax-reservedPIDs)
}

// statProcesses is /proc/stat's "processes" line.
func statProcesses(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if v, ok := bytes.CutPrefix(line, []byte("processes ")); ok {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// loadavgLast is /proc/loadavg's fifth field, the last PID allocated.
func loadavgLast(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) < 5 {
		return 0, false
	}
	n, err := strconv.Atoi(string(f[4]))
	return n, err == nil && n >= 0
}

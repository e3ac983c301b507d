// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package bootclock converts CLOCK_BOOTTIME (what BPF programs stamp) to
// wall-clock time.
package bootclock

import "golang.org/x/sys/unix"

// clockTries: boot clock reads per offset measurement. A thread (or a VM's
// vCPU) descheduled between the reads of one makes it off by up to half
// the time it lost, milliseconds on a busy host, more than a profiler's
// sampling period; the narrowest of several is off by at most half its
// own width.
const clockTries = 8

// readClocks reads CLOCK_REALTIME, CLOCK_BOOTTIME, CLOCK_REALTIME (ns).
func readClocks() (r1, b, r2 int64, ok bool) {
	var t1, tb, t2 unix.Timespec
	if unix.ClockGettime(unix.CLOCK_REALTIME, &t1) != nil ||
		unix.ClockGettime(unix.CLOCK_BOOTTIME, &tb) != nil ||
		unix.ClockGettime(unix.CLOCK_REALTIME, &t2) != nil {
		return 0, 0, 0, false
	}
	return t1.Nano(), tb.Nano(), t2.Nano(), true
}

// WallOffset is CLOCK_REALTIME - CLOCK_BOOTTIME now (ok false when a clock
// cannot be read): a boot time plus it is a wall-clock time.
func WallOffset() (int64, bool) { return bootToWall(readClocks) }

// bootToWall returns CLOCK_REALTIME - CLOCK_BOOTTIME: the boot clock read
// between two wall-clock reads, taken at their midpoint, from the
// narrowest of clockTries such reads.
func bootToWall(read func() (r1, b, r2 int64, ok bool)) (int64, bool) {
	var off, width int64 = 0, -1
	for range clockTries {
		r1, b, r2, ok := read()
		if !ok {
			return 0, false
		}
		if w := r2 - r1; width < 0 || w < width {
			off, width = r1+w/2-b, w
		}
	}
	return off, width >= 0
}

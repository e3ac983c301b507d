// SPDX-License-Identifier: Apache-2.0

//go:build linux

package envscan

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"

	"github.com/otelctx/otelctx/internal/proc/pidclock"
)

// The PID allocator's position (package pidclock): /proc/stat's
// "processes" counts the tasks created since boot, /proc/loadavg's fifth
// field is the last PID allocated.

// readPIDClock reads the PID allocator's position: the forks count first, then the last PID: between the two,
// new tasks move the last PID on, so the reading errs on the side of more
// tasks (a conservative bound).
func readPIDClock(procRoot string) pidclock.Reading {
	if procRoot == "" {
		procRoot = "/proc"
	}
	forks, ok := statProcesses(filepath.Join(procRoot, "stat"))
	if !ok {
		return pidclock.Reading{}
	}
	last, ok := loadavgLast(filepath.Join(procRoot, "loadavg"))
	if !ok {
		return pidclock.Reading{}
	}
	return pidclock.Reading{Forks: forks, Last: last, OK: true}
}

// readPIDMax is /proc/sys/kernel/pid_max, 0 when unreadable.
func readPIDMax(procRoot string) int {
	if procRoot == "" {
		procRoot = "/proc"
	}
	b, err := os.ReadFile(filepath.Join(procRoot, "sys/kernel/pid_max"))
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil || n <= pidclock.ReservedPIDs {
		return 0
	}
	return n
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

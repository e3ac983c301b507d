// SPDX-License-Identifier: Apache-2.0

// Package procstat reads a process's start time: with the PID, it identifies
// a process across PID reuse.
package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

var ErrMalformed = errors.New("malformed stat")

// StartTicks is the start time in clock ticks since boot (stat field 22).
func StartTicks(procRoot string, pid int) (uint64, error) {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	t, err := ParseStartTicks(b)
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	return t, nil
}

// ParseStartTicks is field 22, the start time.
func ParseStartTicks(b []byte) (uint64, error) { return Field(b, 22) }

// Field is numeric field n (numbered as in proc_pid_stat(5), from 3, the
// state, on) of a stat line; fields are counted after the last ')': the
// command name may hold spaces and parentheses.
func Field(b []byte, n int) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: no command name", ErrMalformed)
	}
	if n < 3 {
		return 0, fmt.Errorf("%w: field %d is not after the command name", ErrMalformed, n)
	}
	f := bytes.Fields(b[i+1:])
	field := n - 3 // the fields after the command name start at 3 (state)
	if len(f) <= field {
		return 0, fmt.Errorf("%w: %d fields after the command name", ErrMalformed, len(f))
	}
	t, err := strconv.ParseUint(string(f[field]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: field %d %q", ErrMalformed, n, f[field])
	}
	return t, nil
}

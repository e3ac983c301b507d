// SPDX-License-Identifier: Apache-2.0

// Package procstat reads /proc/PID/stat and the real UID of
// /proc/PID/status: the start time that, with the PID, identifies a process
// across PID reuse, and what the scanner needs to skip kernel threads.
package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

var ErrMalformed = errors.New("malformed stat")

// FlagKthread is PF_KTHREAD in Stat.Flags: a kernel thread, no user memory.
const FlagKthread = 0x00200000

// Stat holds the fields of a stat line that otelctx uses, numbered as in
// proc_pid_stat(5).
type Stat struct {
	Comm         []byte // field 2, aliasing the parsed line
	Flags        uint64 // field 9
	UTime, STime uint64 // fields 14 and 15, in clock ticks
	StartTicks   uint64 // field 22, clock ticks since boot
}

// StartTicks is the start time in clock ticks since boot (stat field 22).
func StartTicks(procRoot string, pid int) (uint64, error) {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	t, err := ParseStartTicks(b)
	if err != nil {
		return 0, fmt.Errorf("pid %d stat: %w", pid, err)
	}
	return t, nil
}

// ParseStartTicks is field 22, the start time.
func ParseStartTicks(b []byte) (uint64, error) {
	st, err := Parse(b)
	return st.StartTicks, err
}

// Parse reads a stat line without allocating (the scanner parses one for
// every new process). The command name may hold spaces and parentheses:
// fields are counted after its last ')'.
func Parse(b []byte) (Stat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Stat{}, fmt.Errorf("%w: no command name", ErrMalformed)
	}
	st := Stat{Comm: b[open+1 : end]}
	rest := b[end+1:]
	for field := 3; field <= 22; field++ {
		rest = bytes.TrimLeft(rest, " ")
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			i = len(rest)
		}
		tok := bytes.TrimRight(rest[:i], "\n")
		if len(tok) == 0 {
			return Stat{}, fmt.Errorf("%w: %d fields", ErrMalformed, field-1)
		}
		var dst *uint64
		switch field {
		case 9:
			dst = &st.Flags
		case 14:
			dst = &st.UTime
		case 15:
			dst = &st.STime
		case 22:
			dst = &st.StartTicks
		}
		if dst != nil {
			v, err := parseUint(tok)
			if err != nil {
				return Stat{}, fmt.Errorf("field %d: %w", field, err)
			}
			*dst = v
		}
		rest = rest[i:]
	}
	return st, nil
}

func parseUint(b []byte) (uint64, error) {
	if len(b) > 20 {
		return 0, fmt.Errorf("%w: %q", ErrMalformed, b)
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q", ErrMalformed, b)
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, fmt.Errorf("%w: %q overflows", ErrMalformed, b)
		}
		v = v*10 + d
	}
	return v, nil
}

// EnvArea is where a process's environment strings are in its memory (stat
// fields 50 and 51, Linux 3.5+). execve puts them on the new image's
// stack, so a different area with the same start time says the process
// exec'd. Zero: the kernel did not show them (no ptrace read access).
type EnvArea struct{ Start, End uint64 }

// Exec is a process's identity with the image it runs: its start time and
// its environment's area.
type Exec struct {
	StartTicks uint64
	Env        EnvArea
}

// ReadExec reads pid's start time and environment area.
func ReadExec(procRoot string, pid int) (Exec, error) {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Exec{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	x, err := ParseExec(b)
	if err != nil {
		return Exec{}, fmt.Errorf("pid %d stat: %w", pid, err)
	}
	return x, nil
}

// ParseExec parses a whole stat line's start time and environment area; a
// line of fewer than 51 fields (an older kernel) has a zero area.
func ParseExec(b []byte) (Exec, error) {
	st, err := Parse(b)
	if err != nil {
		return Exec{}, err
	}
	x := Exec{StartTicks: st.StartTicks}
	fields := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
	// fields[0] is field 3.
	if len(fields) < 51-2 {
		return x, nil
	}
	if x.Env.Start, err = parseUint(fields[50-3]); err != nil {
		return Exec{}, fmt.Errorf("field 50: %w", err)
	}
	if x.Env.End, err = parseUint(fields[51-3]); err != nil {
		return Exec{}, fmt.Errorf("field 51: %w", err)
	}
	return x, nil
}

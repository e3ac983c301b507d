// Package procstat reads what otelctx needs of /proc/PID/stat: the start
// time that, with the PID, identifies a process (a PID can be reused; a
// PID and a start time cannot).
package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// ErrMalformed: the stat file does not have the expected fields.
var ErrMalformed = errors.New("malformed stat")

// StartTicks reads field 22 of <procRoot>/<pid>/stat: the process's start
// time in clock ticks since boot (scan.ProcessID.StartTicks).
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

// ParseStartTicks takes field 22 of a stat line. The command name (field
// 2) may hold spaces and parentheses, so fields are counted after its last
// ')'.
func ParseStartTicks(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: no command name", ErrMalformed)
	}
	f := bytes.Fields(b[i+1:])
	const field = 22 - 3 // the fields after the command name start at 3 (state)
	if len(f) <= field {
		return 0, fmt.Errorf("%w: %d fields after the command name", ErrMalformed, len(f))
	}
	t, err := strconv.ParseUint(string(f[field]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: start time %q", ErrMalformed, f[field])
	}
	return t, nil
}

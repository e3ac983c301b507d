// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/proc/remote"
)

// procStat is what the scanner needs of /proc/PID/stat.
type procStat struct {
	start   uint64 // field 22: with the PID, the process's identity
	kthread bool   // PF_KTHREAD in field 9: no user memory to read
	comm    []byte // field 2, aliasing the reader's buffer
}

// statReader reads /proc/PID/stat into a buffer reused across reads: the
// scanner reads it for every new process and at every second look at a
// candidate, so the read should cost the syscalls and nothing else.
type statReader struct {
	root string
	buf  [1024]byte // field 22 ends within ~500 bytes whatever the values
}

// read returns pid's stat fields. A process that is gone gives an error
// wrapping remote.ErrProcessGone.
func (r *statReader) read(pid int) (procStat, error) {
	fd, err := unix.Open(r.root+"/"+strconv.Itoa(pid)+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return procStat{}, statErr(pid, err)
	}
	defer unix.Close(fd)
	var n int
	for {
		n, err = unix.Read(fd, r.buf[:])
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return procStat{}, statErr(pid, err)
	}
	return parseStat(r.buf[:max(n, 0)])
}

// start returns pid's start time (0 when unreadable or gone).
func (r *statReader) start(pid int) uint64 {
	st, err := r.read(pid)
	if err != nil {
		return 0
	}
	return st.start
}

func statErr(pid int, err error) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("pid %d: %w: %w", pid, remote.ErrProcessGone, err)
	}
	return fmt.Errorf("pid %d stat: %w", pid, err)
}

// parseStat takes fields 2, 9 and 22 of a stat line. The command name may
// hold spaces and parentheses: fields are counted after its last ')'.
func parseStat(b []byte) (procStat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("%w: no command name", procstat.ErrMalformed)
	}
	st := procStat{comm: b[open+1 : end]}
	rest := b[end+1:]
	const pfKthread = 0x00200000
	for field := 2; field < 22; {
		rest = bytes.TrimLeft(rest, " ")
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			i = len(rest)
		}
		field++
		switch field {
		case 9:
			flags, err := parseUint(rest[:i])
			if err != nil {
				return procStat{}, err
			}
			st.kthread = flags&pfKthread != 0
		case 22:
			start, err := parseUint(rest[:i])
			if err != nil {
				return procStat{}, err
			}
			st.start = start
			return st, nil
		}
		if i == len(rest) {
			break
		}
		rest = rest[i:]
	}
	return procStat{}, fmt.Errorf("%w: fewer than 22 fields", procstat.ErrMalformed)
}

func parseUint(b []byte) (uint64, error) {
	if len(b) == 0 || len(b) > 20 {
		return 0, fmt.Errorf("%w: field %q", procstat.ErrMalformed, b)
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: field %q", procstat.ErrMalformed, b)
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, fmt.Errorf("%w: field %q overflows", procstat.ErrMalformed, b)
		}
		v = v*10 + d
	}
	return v, nil
}

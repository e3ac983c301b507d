// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/proc/remote"
)

// statReader reads /proc/PID/stat into a buffer reused across reads: the
// scanner reads it for every new process and at every second look at a
// candidate, so the read should cost the syscalls and nothing else.
type statReader struct {
	root string
	buf  [1024]byte // field 22 ends within ~500 bytes whatever the values
}

// read returns pid's stat fields. A process that is gone gives an error
// wrapping remote.ErrProcessGone.
func (r *statReader) read(pid int) (procstat.Stat, error) {
	fd, err := unix.Open(r.root+"/"+strconv.Itoa(pid)+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return procstat.Stat{}, statErr(pid, err)
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
		return procstat.Stat{}, statErr(pid, err)
	}
	st, err := procstat.Parse(r.buf[:max(n, 0)])
	if err != nil {
		return procstat.Stat{}, fmt.Errorf("pid %d stat: %w", pid, err)
	}
	return st, nil
}

// start returns pid's start time (0 when unreadable or gone).
func (r *statReader) start(pid int) uint64 {
	st, err := r.read(pid)
	if err != nil {
		return 0
	}
	return st.StartTicks
}

func statErr(pid int, err error) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("pid %d: %w: %w", pid, remote.ErrProcessGone, err)
	}
	return fmt.Errorf("pid %d stat: %w", pid, err)
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package lockread

import (
	"sync/atomic"
	"time"

	"github.com/otelctx/otelctx/internal/proc/owner"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/proc/remote"
)

// call is one read handed to its goroutine.
type call struct {
	done    chan error
	entered remote.Entry
	// state: 0 running, 1 finished, 2 abandoned.
	state atomic.Int32
}

// wait is remote.Await with the read timeout of every read of another
// process (read_timeout).
func wait(c *call) (error, bool) {
	timeout := remote.ReadTimeout()
	t := time.NewTimer(timeout)
	err, _, ok := remote.Await(c.done, &c.entered, t, timeout)
	return err, ok
}

// realUID is the share pid's hung reads count against (package owner: its
// container, its user namespace's creator, else its real UID); its status,
// cgroup and namespace take no mmap lock.
func realUID(pid int) int { return owner.Of("/proc", pid, procstat.RealUID("/proc", pid)) }

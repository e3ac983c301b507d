// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import "math"

// Known sets known[i] to whether the catalog holds a process, live or
// retained, with PID pids[i], under one read lock: a message may name
// thousands of PIDs, most of them of no publisher, and ProcessFor (one lock
// each) is then asked only about the known ones.
func (c *Catalog) Known(pids []int64, known []bool) {
	env := c.env.Load() != nil
	c.mu.RLock()
	defer c.mu.RUnlock()
	for i, pid := range pids {
		if pid <= 0 || pid > math.MaxInt32 { // no PID: not another one's, truncated
			known[i] = false
			continue
		}
		_, live := c.procs[int(pid)]
		// With the environment source on, any PID may name itself there.
		known[i] = live || len(c.exited[int(pid)]) > 0 || env
	}
}

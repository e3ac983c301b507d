// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import "time"

// Identity-unchecked writers for this package's tests: production code
// writes through ObserveFor and UpdateThreadsFor, which check the identity.

// updateThreadsPID: the snapshot's time is its records' SeenAt.
func (c *Catalog) updateThreadsPID(pid int, records []*ThreadRecord, unread []int) (dropped int) {
	at := time.Now()
	if len(records) > 0 {
		at = records[0].SeenAt
	}
	return c.updateThreadsPIDAt(pid, at, records, unread)
}

func (c *Catalog) updateThreadsPIDAt(pid int, at time.Time, records []*ThreadRecord, unread []int) (dropped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.procs[pid]
	if !ok {
		return 0
	}
	return c.updateThreads(p.ID, at.UnixNano(), records, unread)
}

func (c *Catalog) observePID(pid, tid int, at time.Time, rec *ThreadRecord) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.procs[pid]
	if !ok {
		return false
	}
	return c.observe(p.ID, tid, at.UnixNano(), rec, false)
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"container/heap"
	"math"

	"github.com/otelctx/otelctx/internal/publisher"
)

// exitEntry is an exited process in the exit-time queue.
type exitEntry struct {
	exitedAt int64
	id       publisher.ProcessID
}

// exitQueue orders the exited processes by exit time, so that expiry and
// the retention bound cost the processes they drop, not a walk of every
// exited PID. Entries are not removed when a process is published again
// (unretire): such a stale entry no longer matches an exited process and
// is skipped when it comes out.
type exitQueue []exitEntry

func (q exitQueue) Len() int           { return len(q) }
func (q exitQueue) Less(i, j int) bool { return q[i].exitedAt < q[j].exitedAt }
func (q exitQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *exitQueue) Push(x any)        { *q = append(*q, x.(exitEntry)) }
func (q *exitQueue) Pop() any {
	old := *q
	n := len(old) - 1
	e := old[n]
	*q = old[:n]
	return e
}

// The methods below hold c.mu.

// queueExit records that id exited at at (retire).
func (c *Catalog) queueExit(id publisher.ProcessID, at int64) {
	heap.Push(&c.exitQ, exitEntry{exitedAt: at, id: id})
	// Stale entries outnumbering the live ones (processes published
	// again): rebuild, so that the queue stays O(retained).
	if len(c.exitQ) > 2*c.nExited+64 {
		c.exitQ = c.exitQ[:0]
		for _, gone := range c.exited {
			for _, e := range gone {
				c.exitQ = append(c.exitQ, exitEntry{exitedAt: e.exitedAt, id: e.p.ID})
			}
		}
		heap.Init(&c.exitQ)
	}
}

// expire forgets the processes that exited before the retention period;
// all of them with no retention.
func (c *Catalog) expire(now int64) {
	limit := int64(math.MaxInt64)
	if c.retention > 0 {
		limit = now - int64(c.retention)
	}
	for c.nExited > 0 && len(c.exitQ) > 0 && c.exitQ[0].exitedAt < limit {
		c.dropExited(heap.Pop(&c.exitQ).(exitEntry))
	}
	if c.nExited == 0 {
		c.exitQ = c.exitQ[:0]
	}
}

// dropExited forgets the exited process of e; false if e is stale.
func (c *Catalog) dropExited(e exitEntry) bool {
	gone := c.exited[e.id.PID]
	for i, g := range gone {
		if g.p.ID != e.id || g.exitedAt != e.exitedAt {
			continue
		}
		c.forget(g.p.ID)
		c.nExited--
		c.retainedBytes -= g.p.Cost()
		if len(gone) == 1 {
			delete(c.exited, e.id.PID)
		} else {
			c.exited[e.id.PID] = append(gone[:i:i], gone[i+1:]...)
		}
		c.leaveOrigin(g.origin)
		return true
	}
	return false
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package catalog holds what otelctx knows of publishing processes and
// their threads' context histories, so that a profile sample taken at t is
// joined with the span its thread had at t. Profiles arrive seconds late,
// often after the process exited: exited processes stay joinable for a
// retention period, keyed by PID and start time so a reused PID never
// shows one process's threads to another. One writer; readers take a read lock.
package catalog

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/otelctx/otelctx/internal/publisher"
)

const (
	// DefaultRetention covers two eBPF profiler report intervals (5 s) and queueing.
	DefaultRetention   = time.Minute
	DefaultMaxRetained = 4096
	// DefaultMaxRetainedMemory bounds what the retained exits hold
	// (publisher.Process.Cost: 16 MiB, 250 of the largest contexts), so
	// that publishers of the largest contexts exiting in numbers cannot
	// take the agent past its memory limit within a retention period.
	DefaultMaxRetainedMemory = 16 << 20
)

// CreationSlack: creation times have /proc/PID/stat's 10 ms resolution, rounded down.
const CreationSlack = 10 * time.Millisecond

type Catalog struct {
	mu    sync.RWMutex
	procs map[int]*publisher.Process
	// exited: by PID, oldest first.
	exited  map[int][]exitedProc
	nExited int
	// retainedBytes is what the retained exits cost (Process.Cost),
	// bounded by maxRetainedBytes.
	retainedBytes, maxRetainedBytes int
	// exitQ: the exited processes by exit time; owners and byRetained:
	// by UID, then executable, for the retention bound (origin.go).
	exitQ       exitQueue
	owners      map[int]*owner
	byRetained  ranking[*owner]
	retention   time.Duration
	maxRetained int
	now         func() time.Time

	threads map[publisher.ProcessID]*procThreads
	// byThreads and byEntries rank the processes by what they hold (share.go).
	byThreads, byEntries ranking[*procThreads]
	nThreads             int
	nEntries             int
	maxPerProc           int
	maxThreads           int
	depth                int
	maxEntries           int
	// evictions holds the Evicted and Refused counts of Occupancy.
	evictions Occupancy
	// attrSets shares the sorted attributes of records with equal ones.
	attrSets map[string][]Attribute
	// env is the environment source (nil: off), environ.go.
	env atomic.Pointer[envSource]
	// holders checks who holds live publishers' PIDs (nil: off), holders.go.
	holders atomic.Pointer[holders]
}

// exitedProc: data taken after until (Unix ns) is not its. exitedAt:
// when its exit was seen (retention counts from it); until: a time by
// which it had exited, the next holder's start when it was seen.
type exitedProc struct {
	p        *publisher.Process
	exitedAt int64
	until    int64
	origin   *origin
}

func New() *Catalog {
	c := &Catalog{
		procs:       map[int]*publisher.Process{},
		exited:      map[int][]exitedProc{},
		owners:      map[int]*owner{},
		byRetained:  newRetainedRanking(),
		retention:   DefaultRetention,
		maxRetained: DefaultMaxRetained,
		// The exits' memory, as the count, is taken from the user holding
		// the most exits (origin.go).
		maxRetainedBytes: DefaultMaxRetainedMemory,
		now:              time.Now,
		threads:          map[publisher.ProcessID]*procThreads{},
		maxPerProc:       DefaultMaxThreadsPerProcess,
		maxThreads:       DefaultMaxThreads,
		depth:            DefaultHistoryDepth,
		maxEntries:       DefaultMaxEntries,
		attrSets:         map[string][]Attribute{},
	}
	c.byThreads, c.byEntries = newShares()
	return c
}

// SetRetention: values < 0 keep the current setting; a retention of 0
// forgets a process when it is lost.
func (c *Catalog) SetRetention(d time.Duration, maxProcesses int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d >= 0 {
		c.retention = d
	}
	if maxProcesses >= 0 {
		c.maxRetained = maxProcesses
	}
	c.expire(c.now().UnixNano())
}

// SetRetainedMemory bounds what the retained exits hold, in bytes
// (publisher.Process.Cost; <= 0 keeps the current setting).
func (c *Catalog) SetRetainedMemory(bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if bytes > 0 {
		c.maxRetainedBytes = bytes
	}
	c.bound()
}

// Process returns the live process with pid; data with a time should use
// ProcessAt, since PIDs are reused.
func (c *Catalog) Process(pid int) (*publisher.Process, bool) {
	c.mu.RLock()
	p, ok := c.procs[pid]
	c.mu.RUnlock()
	return p, ok
}

type Lookup uint8

const (
	Found Lookup = iota
	NoProcess
	// OtherHolder: the data is a previous or later holder's of the PID.
	OtherHolder
	// OverBudget: the PID would have cost a /proc look-up past the
	// caller's EnvBudget; it is not known whether a process names itself.
	OverBudget
)

// ProcessAt returns the process that held pid at t (Unix ns): the latest
// created by t, if not exited before t. t = 0 means the live process.
func (c *Catalog) ProcessAt(pid int, t int64) (*publisher.Process, Lookup) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	live, isLive := c.procs[pid]
	gone := c.exited[pid]
	if !isLive && len(gone) == 0 {
		return nil, NoProcess
	}
	if t == 0 {
		if isLive {
			return live, Found
		}
		return nil, OtherHolder
	}
	if isLive && createdBy(live, t) {
		return live, Found
	}
	for i := len(gone) - 1; i >= 0; i-- {
		if e := gone[i]; createdBy(e.p, t) {
			if t <= e.until {
				return e.p, Found
			}
			break // taken after it exited: a later holder's
		}
	}
	return nil, OtherHolder
}

func createdBy(p *publisher.Process, t int64) bool {
	return p.CreationTime.IsZero() || t >= p.CreationTime.Add(-CreationSlack).UnixNano()
}

func (c *Catalog) Processes() []*publisher.Process {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*publisher.Process, 0, len(c.procs))
	for _, p := range c.procs {
		out = append(out, p)
	}
	return out
}

func (c *Catalog) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.procs)
}

func (c *Catalog) RetainedCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nExited
}

// Apply must run every round, with or without events, to expire processes.
func (c *Catalog) Apply(events []publisher.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now().UnixNano()
	for _, e := range events {
		pid := e.Process.ID.PID
		switch e.Kind {
		case publisher.Found, publisher.Updated:
			if cur, ok := c.procs[pid]; ok && cur.ID != e.Process.ID {
				// Replaced without a Lost: the previous holder exited no later
				// than its successor was created.
				at := now
				if !e.Process.CreationTime.IsZero() {
					at = min(at, e.Process.CreationTime.UnixNano())
				}
				c.retire(cur, at, c.exitTime(cur.ID, at))
			}
			if cur, ok := c.procs[pid]; !ok || cur.ID != e.Process.ID {
				c.forgetHolder(pid)
			}
			// Published again after a Lost: live, not retained.
			c.unretire(e.Process.ID)
			c.procs[pid] = e.Process
		case publisher.Lost:
			// A successor with the same PID may already have been found this round.
			if cur, ok := c.procs[pid]; ok && cur.ID == e.Process.ID {
				delete(c.procs, pid)
				c.retire(cur, now, c.exitTime(cur.ID, now))
			}
		}
	}
	c.expire(now)
}

// The methods below hold c.mu.
func (c *Catalog) retire(p *publisher.Process, at, until int64) {
	if c.retention <= 0 || c.maxRetained == 0 {
		c.forget(p.ID)
		return
	}
	o := c.originFor(p)
	c.exited[p.ID.PID] = append(c.exited[p.ID.PID], exitedProc{p: p, exitedAt: at, until: min(at, until), origin: o})
	c.nExited++
	c.retainedBytes += p.Cost()
	c.queueExit(p.ID, at)
	c.queueOrigin(o, exitEntry{exitedAt: at, id: p.ID})
	c.bound()
}

// bound enforces the retention bounds, the count's and the memory's.
func (c *Catalog) bound() {
	for c.nExited > 0 && (c.nExited > c.maxRetained || c.retainedBytes > c.maxRetainedBytes) {
		if !c.dropBiggestOrigin() {
			return
		}
	}
}

// unretire leaves the threads, which are the live process's again.
func (c *Catalog) unretire(id publisher.ProcessID) {
	gone := c.exited[id.PID]
	var left *origin
	for i, e := range gone {
		if e.p.ID == id {
			gone = append(gone[:i], gone[i+1:]...)
			c.nExited--
			c.retainedBytes -= e.p.Cost()
			left = e.origin
			break
		}
	}
	if len(gone) == 0 {
		delete(c.exited, id.PID)
	} else {
		c.exited[id.PID] = gone
	}
	if left != nil {
		c.leaveOrigin(left)
	}
}

// forget keeps the threads of an identity that is live again.
func (c *Catalog) forget(id publisher.ProcessID) {
	if p, ok := c.procs[id.PID]; ok && p.ID == id {
		return
	}
	c.removeThreads(id)
}

// accepts: an exited id still takes observations made before its exit was
// noticed (samples in flight).
func (c *Catalog) accepts(id publisher.ProcessID, ns int64) bool {
	if p, ok := c.procs[id.PID]; ok {
		return p.ID == id
	}
	for _, e := range c.exited[id.PID] {
		if e.p.ID == id {
			return ns <= e.until
		}
	}
	return false
}

// idOf: a PID-only query means the live process, else the latest exited one.
func (c *Catalog) idOf(pid int) (publisher.ProcessID, bool) {
	if p, ok := c.procs[pid]; ok {
		return p.ID, true
	}
	if gone := c.exited[pid]; len(gone) > 0 {
		return gone[len(gone)-1].p.ID, true
	}
	return publisher.ProcessID{}, false
}

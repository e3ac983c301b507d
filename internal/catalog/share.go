// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import "github.com/otelctx/otelctx/internal/publisher"

// procThreads is one process's thread histories and what they hold of the
// catalog's budgets. The total bounds (threads, entries) are enforced on the
// process holding the most first: a process never loses a thread or an entry
// to one that holds fewer, so a busy or many-threaded neighbour sheds its own
// history before a quiet process loses any of its.
type procThreads struct {
	id       publisher.ProcessID
	ths      map[int]*history
	nEntries int
	// Positions in Catalog.byThreads and Catalog.byEntries.
	threadsAt, entriesAt int
}

func newShares() (byThreads, byEntries ranking[*procThreads]) {
	byThreads = ranking[*procThreads]{
		before: func(a, b *procThreads) bool { return len(a.ths) > len(b.ths) },
		slot:   func(p *procThreads) *int { return &p.threadsAt },
	}
	byEntries = ranking[*procThreads]{
		before: func(a, b *procThreads) bool { return a.nEntries > b.nEntries },
		slot:   func(p *procThreads) *int { return &p.entriesAt },
	}
	return byThreads, byEntries
}

// The methods below hold c.mu.

// threadsOf is id's threads (nil: none).
func (c *Catalog) threadsOf(id publisher.ProcessID) map[int]*history {
	if pt := c.threads[id]; pt != nil {
		return pt.ths
	}
	return nil
}

func (pt *procThreads) thread(tid int) *history {
	if pt == nil {
		return nil
	}
	return pt.ths[tid]
}

// procFor is id's share, made when it holds nothing yet.
func (c *Catalog) procFor(id publisher.ProcessID) *procThreads {
	pt := c.threads[id]
	if pt == nil {
		pt = &procThreads{id: id, ths: map[int]*history{}}
		c.threads[id] = pt
		c.byThreads.add(pt)
		c.byEntries.add(pt)
	}
	return pt
}

// dropEmpty forgets a share that holds no thread.
func (c *Catalog) dropEmpty(pt *procThreads) {
	if len(pt.ths) > 0 || c.threads[pt.id] != pt {
		return
	}
	delete(c.threads, pt.id)
	c.byThreads.remove(pt)
	c.byEntries.remove(pt)
}

func (c *Catalog) addThread(pt *procThreads, tid int, h *history) {
	pt.ths[tid] = h
	c.nThreads++
	c.byThreads.fix(pt)
	c.addEntries(pt, h.len())
}

func (c *Catalog) addEntries(pt *procThreads, n int) {
	if n == 0 {
		return
	}
	pt.nEntries += n
	c.nEntries += n
	c.byEntries.fix(pt)
}

func (c *Catalog) evict(pt *procThreads, tid int) {
	h, ok := pt.ths[tid]
	if !ok {
		return
	}
	delete(pt.ths, tid)
	c.evictions.EvictedThreads++
	c.evictions.EvictedRuns += int64(h.len())
	c.nThreads--
	c.byThreads.fix(pt)
	c.addEntries(pt, -h.len())
	c.dropEmpty(pt)
}

func (c *Catalog) removeThreads(id publisher.ProcessID) {
	pt := c.threads[id]
	if pt == nil {
		return
	}
	c.nThreads -= len(pt.ths)
	c.addEntries(pt, -pt.nEntries)
	clear(pt.ths)
	c.dropEmpty(pt)
}

// leastRecent is the thread of pt observed least recently before ns (-1:
// none): threads exit without telling the sampler.
func (pt *procThreads) leastRecent(ns int64) int {
	victim, oldest := -1, ns
	for tid, h := range pt.ths {
		if l := h.lastSeen(); l < oldest {
			victim, oldest = tid, l
		}
	}
	return victim
}

// makeRoom makes room for a new thread of pt observed at ns: at the
// per-process bound pt gives up its own least recent thread; at the total
// bounds the process holding the most gives up, unless that is pt.
func (c *Catalog) makeRoom(pt *procThreads, ns int64) bool {
	switch {
	case len(pt.ths) >= c.maxPerProc:
		c.evict(pt, pt.leastRecent(ns))
	case c.nThreads >= c.maxThreads:
		if b := c.byThreads.first(); b != pt && len(b.ths) > len(pt.ths) {
			c.evict(b, b.leastRecent(maxNs))
		} else {
			c.evict(pt, pt.leastRecent(ns))
		}
	}
	if c.nEntries >= c.maxEntries && !c.shedFor(pt, 1) {
		c.evict(pt, pt.leastRecent(ns))
	}
	return len(pt.ths) < c.maxPerProc && c.nThreads < c.maxThreads && c.nEntries < c.maxEntries
}

const maxNs = int64(^uint64(0) >> 1)

// shedFor frees one entry, at the total bound, for pt's thread of keep-1
// entries: the process holding the most entries gives up one when it
// holds more than pt, else one of pt's threads with more than keep.
func (c *Catalog) shedFor(pt *procThreads, keep int) bool {
	if b := c.byEntries.first(); b != pt && b.nEntries > pt.nEntries {
		if !c.shedLonger(b, 1) {
			c.evict(b, b.leastRecent(maxNs))
		}
		return true
	}
	return c.shedLonger(pt, keep)
}

// shedCandidates: map iteration starts at random, so this samples threads
// as approximated LRU caches do.
const shedCandidates = 64

// shedLonger drops the oldest entry of the longest of a sample of pt's
// threads, if it holds more than keep: entries spread over threads.
func (c *Catalog) shedLonger(pt *procThreads, keep int) bool {
	var longest *history
	seen := 0
	for _, h := range pt.ths {
		if longest == nil || h.len() > longest.len() {
			longest = h
		}
		if seen++; seen >= shedCandidates {
			break
		}
	}
	if longest == nil || longest.len() <= keep {
		return false
	}
	longest.linearize(1)
	c.evictions.EvictedRuns++
	c.addEntries(pt, -1)
	return true
}

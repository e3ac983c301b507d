// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import "time"

// Observation is a run of identical observations of one thread.
type Observation struct {
	// Record is nil when the thread had no (valid) record.
	Record      *ThreadRecord
	First, Last time.Time
}

// Thread returns the latest record of tid in pid; ok is false when it has
// none. The record is shared: do not modify it.
func (c *Catalog) Thread(pid, tid int) (rec *ThreadRecord, seenAt time.Time, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	id, _ := c.idOf(pid)
	h := c.threads[id].thread(tid)
	if h == nil || h.current() == nil {
		return nil, time.Time{}, false
	}
	e := h.latest()
	return e.rec, time.Unix(0, e.last), true
}

// ThreadAt is a debugging view of ObservationAt (rec nil with ok: "no
// record"); joins use AppendRuns and decide what an observation vouches for.
func (c *Catalog) ThreadAt(pid, tid int, t time.Time) (rec *ThreadRecord, seenAt time.Time, ok bool) {
	o, ok := c.ObservationAt(pid, tid, t)
	if !ok {
		return nil, time.Time{}, false
	}
	if !o.Last.After(t) {
		return o.Record, o.Last, true
	}
	return o.Record, o.First, true
}

// ObservationAt returns the latest run started at or before t.
func (c *Catalog) ObservationAt(pid, tid int, t time.Time) (Observation, bool) {
	ns := t.UnixNano()
	c.mu.RLock()
	defer c.mu.RUnlock()
	id, _ := c.idOf(pid)
	h := c.threads[id].thread(tid)
	if h == nil {
		return Observation{}, false
	}
	i := h.after(ns)
	if i == 0 {
		return Observation{}, false
	}
	e := h.at(i - 1)
	return Observation{Record: e.rec, First: time.Unix(0, e.first), Last: time.Unix(0, e.last)}, true
}

// History is every run of a thread's records the catalog holds, oldest
// first. No product code reads it (the join copies runs with AppendRuns):
// it is exported for the tests of the packages that feed the catalog (the
// watcher's, test/enrich, test/sampler, test/hostile), which check what
// reached it; catalog.Catalog's other readers are the product's.
func (c *Catalog) History(pid, tid int) []Observation {
	c.mu.RLock()
	defer c.mu.RUnlock()
	id, _ := c.idOf(pid)
	h := c.threads[id].thread(tid)
	if h == nil {
		return nil
	}
	out := make([]Observation, h.len())
	for i := range out {
		e := h.at(i)
		out[i] = Observation{Record: e.rec, First: time.Unix(0, e.first), Last: time.Unix(0, e.last)}
	}
	return out
}

func (c *Catalog) Threads(pid int) []*ThreadRecord {
	c.mu.RLock()
	defer c.mu.RUnlock()
	id, _ := c.idOf(pid)
	ths := c.threadsOf(id)
	out := make([]*ThreadRecord, 0, len(ths))
	for _, h := range ths {
		if r := h.current(); r != nil {
			out = append(out, r)
		}
	}
	return out
}

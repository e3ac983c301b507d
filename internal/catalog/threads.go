// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"maps"
	"slices"
	"time"

	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/publisher"
)

const (
	DefaultMaxThreadsPerProcess = 1024
	DefaultMaxThreads           = 65536
	// DefaultHistoryDepth counts span changes (identical runs are one entry):
	// 41 s of a thread switching spans every 10 ms.
	DefaultHistoryDepth = 4096
	// DefaultMaxEntries: under 200 MiB with 640-byte records, a few MiB typically.
	DefaultMaxEntries = 1 << 18
)

// ThreadRecord is immutable once in the catalog.
type ThreadRecord struct {
	PID, TID int
	// SeenAt is the first observation of the run.
	SeenAt time.Time
	Record threadctx.Record
	// Attributes are named through the process's threadlocal.attribute_key_map.
	Attributes map[string]string
	// Source: consumers join records the same way whatever it is.
	Source string
	// sorted is set before the record becomes visible.
	sorted []Attribute
}

// SameContent compares content: readers make a new ThreadRecord per read.
func SameContent(a, b *ThreadRecord) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Source == b.Source && a.Record.TraceID == b.Record.TraceID && a.Record.SpanID == b.Record.SpanID &&
		a.Record.TraceFlags == b.Record.TraceFlags && a.Record.Truncated == b.Record.Truncated &&
		slices.Equal(a.Record.Attrs, b.Record.Attrs) && maps.Equal(a.Attributes, b.Attributes)
}

// entry is a run from first to last (Unix ns); rec nil: no record. An exact
// observation was taken at a sample moment and vouches for that sample alone.
type entry struct {
	first, last           int64
	rec                   *ThreadRecord
	firstExact, lastExact bool
}

// history is a ring, oldest at head; it grows on demand so an idle thread
// costs one entry.
type history struct {
	ents []entry
	head int
}

func (h *history) len() int        { return len(h.ents) }
func (h *history) at(i int) *entry { return &h.ents[(h.head+i)%len(h.ents)] }
func (h *history) latest() *entry  { return h.at(len(h.ents) - 1) }
func (h *history) lastSeen() int64 { return h.latest().last }

// after returns the index of the first entry started after ns.
func (h *history) after(ns int64) int {
	i, j := 0, h.len()
	for i < j {
		m := int(uint(i+j) >> 1)
		if h.at(m).first <= ns {
			i = m + 1
		} else {
			j = m
		}
	}
	return i
}

func (h *history) current() *ThreadRecord {
	if len(h.ents) == 0 {
		return nil
	}
	return h.latest().rec
}

// SetThreadLimits: values < 1 keep the current bound.
func (c *Catalog) SetThreadLimits(perProcess, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if perProcess > 0 {
		c.maxPerProc = perProcess
	}
	if total > 0 {
		c.maxThreads = total
	}
}

// SetHistoryLimits: values < 1 keep the current bound; shrinking applies as
// threads are observed.
func (c *Catalog) SetHistoryLimits(perThread, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if perThread > 0 {
		c.depth = perThread
	}
	if total > 0 {
		c.maxEntries = total
	}
}

func (c *Catalog) ThreadCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nThreads
}

func (c *Catalog) EntryCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nEntries
}

// UpdateThreadsFor records a snapshot: threads in unread are not observed,
// other known ones are observed without a record. ok is false unless id
// still holds its PID: a process that exited during the snapshot must not
// land on a successor.
func (c *Catalog) UpdateThreadsFor(id publisher.ProcessID, at time.Time, records []*ThreadRecord, unread []int) (dropped int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, found := c.procs[id.PID]; !found || p.ID != id {
		return 0, false
	}
	return c.updateThreads(id, at.UnixNano(), records, unread), true
}

func (c *Catalog) updateThreads(id publisher.ProcessID, ns int64, records []*ThreadRecord, unread []int) (dropped int) {
	seen := make(map[int]bool, len(records)+len(unread))
	for _, tid := range unread {
		seen[tid] = true
	}
	for _, r := range records {
		if seen[r.TID] {
			continue
		}
		seen[r.TID] = true
		if !c.observe(id, r.TID, ns, r, false) {
			dropped++
		}
	}
	for tid, h := range c.threadsOf(id) {
		if !seen[tid] && h.current() != nil {
			c.observe(id, tid, ns, nil, false)
		}
	}
	return dropped
}

// ObserveFor records rec (nil: no record) on tid at at; exact: at a
// profiler's sample moment. Dropped past the bounds, when older than the
// thread's latest, or when id no longer holds its PID.
func (c *Catalog) ObserveFor(id publisher.ProcessID, tid int, at time.Time, rec *ThreadRecord, exact bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns := at.UnixNano()
	if !c.accepts(id, ns) {
		return false
	}
	return c.observe(id, tid, ns, rec, exact)
}

func (c *Catalog) observe(id publisher.ProcessID, tid int, ns int64, rec *ThreadRecord, exact bool) bool {
	pt := c.threads[id]
	h := pt.thread(tid)
	if h == nil {
		if rec == nil {
			// An unknown thread already means "no span".
			return true
		}
		ok := c.makeRoom(c.procFor(id), ns)
		pt = c.procFor(id) // room may have been made with the process's last thread
		if !ok {
			c.evictions.RefusedThreads++
			c.dropEmpty(pt)
			return false
		}
		c.prepare(rec)
		h = &history{ents: make([]entry, 0, 4)}
		h.ents = append(h.ents, entry{first: ns, last: ns, rec: rec, firstExact: exact, lastExact: exact})
		c.addThread(pt, tid, h)
		return true
	}
	last := h.latest()
	if ns < last.last {
		// A late snapshot: the history only moves forward.
		return false
	}
	if SameContent(last.rec, rec) {
		last.last, last.lastExact = ns, exact
		return true
	}
	c.prepare(rec)
	c.push(pt, h, entry{first: ns, last: ns, rec: rec, firstExact: exact, lastExact: exact})
	return true
}

// push overwrites the oldest entry at the depth. At the total bound the
// process holding the most entries gives one up (shedFor).
func (c *Catalog) push(pt *procThreads, h *history, e entry) {
	n := h.len()
	if n < c.depth && (c.nEntries < c.maxEntries || c.shedFor(pt, n+1)) {
		if h.head != 0 { // wrapped earlier: put back in order before growing
			h.linearize(0)
		}
		h.ents = append(h.ents, e)
		c.addEntries(pt, 1)
		return
	}
	if n > c.depth { // the depth was lowered: shed the oldest
		drop := n - c.depth
		h.linearize(drop)
		c.addEntries(pt, -drop)
		n = c.depth
	}
	if n < c.depth { // below the depth: the total bound took the oldest
		c.evictions.EvictedRuns++
	}
	h.ents[h.head] = e
	h.head = (h.head + 1) % n
}

func (h *history) linearize(drop int) {
	out := make([]entry, 0, len(h.ents)-drop+1)
	for i := drop; i < len(h.ents); i++ {
		out = append(out, *h.at(i))
	}
	h.ents, h.head = out, 0
}

package catalog

import (
	"maps"
	"slices"
	"time"

	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/threadctx"
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

const (
	SourceOTEP4947 = "otep4947"
	// SourceDD: a DD_OTEL_CTX slot (ids only: no flags, no attributes).
	SourceDD = "dd_otel_ctx"
)

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
func (c *Catalog) UpdateThreadsFor(id scan.ProcessID, at time.Time, records []*ThreadRecord, unread []int) (dropped int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, found := c.procs[id.PID]; !found || p.ID != id {
		return 0, false
	}
	return c.updateThreads(id, at.UnixNano(), records, unread), true
}

func (c *Catalog) updateThreads(id scan.ProcessID, ns int64, records []*ThreadRecord, unread []int) (dropped int) {
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
	for tid, h := range c.threads[id] {
		if !seen[tid] && h.current() != nil {
			c.observe(id, tid, ns, nil, false)
		}
	}
	return dropped
}

// ObserveFor records rec (nil: no record) on tid at at; exact: at a
// profiler's sample moment. Dropped past the bounds, when older than the
// thread's latest, or when id no longer holds its PID.
func (c *Catalog) ObserveFor(id scan.ProcessID, tid int, at time.Time, rec *ThreadRecord, exact bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns := at.UnixNano()
	if !c.accepts(id, ns) {
		return false
	}
	return c.observe(id, tid, ns, rec, exact)
}

func (c *Catalog) observe(id scan.ProcessID, tid int, ns int64, rec *ThreadRecord, exact bool) bool {
	h := c.threads[id][tid]
	if h == nil {
		if rec == nil {
			// An unknown thread already means "no span".
			return true
		}
		if !c.makeRoom(id, ns) {
			return false
		}
		ths := c.threads[id] // an eviction may have removed the process's last thread
		if ths == nil {
			ths = map[int]*history{}
			c.threads[id] = ths
		}
		h = &history{ents: make([]entry, 0, 4)}
		ths[tid] = h
		c.nThreads++
		c.prepare(rec)
		h.ents = append(h.ents, entry{first: ns, last: ns, rec: rec, firstExact: exact, lastExact: exact})
		c.nEntries++
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
	c.push(h, entry{first: ns, last: ns, rec: rec, firstExact: exact, lastExact: exact})
	return true
}

// push overwrites the oldest entry at the depth. At the total bound a thread
// with two more entries gives up its oldest, so entries spread over threads.
func (c *Catalog) push(h *history, e entry) {
	n := h.len()
	if n < c.depth && (c.nEntries < c.maxEntries || c.shedEntry(n+1)) {
		if h.head != 0 { // wrapped earlier: put back in order before growing
			h.linearize(0)
		}
		h.ents = append(h.ents, e)
		c.nEntries++
		return
	}
	if n > c.depth { // the depth was lowered: shed the oldest
		drop := n - c.depth
		h.linearize(drop)
		c.nEntries -= drop
		n = c.depth
	}
	h.ents[h.head] = e
	h.head = (h.head + 1) % n
}

// shedCandidates: map iteration starts at random, so this samples threads
// as approximated LRU caches do.
const shedCandidates = 64

func (c *Catalog) shedEntry(keep int) bool {
	seen := 0
	for _, ths := range c.threads {
		for _, h := range ths {
			if h.len() > keep {
				h.linearize(1)
				c.nEntries--
				return true
			}
			if seen++; seen >= shedCandidates {
				return false
			}
		}
	}
	return false
}

func (h *history) linearize(drop int) {
	out := make([]entry, 0, len(h.ents)-drop+1)
	for i := drop; i < len(h.ents); i++ {
		out = append(out, *h.at(i))
	}
	h.ents, h.head = out, 0
}

// makeRoom evicts the thread observed least recently (threads exit without
// telling the sampler): among id's threads, or a sample of all.
func (c *Catalog) makeRoom(id scan.ProcessID, ns int64) bool {
	if c.nEntries >= c.maxEntries {
		c.shedEntry(1)
	}
	ths := c.threads[id]
	if len(ths) >= c.maxPerProc {
		victim, oldest := -1, ns
		for tid, h := range ths {
			if l := h.lastSeen(); l < oldest {
				victim, oldest = tid, l
			}
		}
		if victim >= 0 {
			c.evict(id, victim)
		}
	} else if c.nThreads >= c.maxThreads {
		var vid scan.ProcessID
		vtid, oldest, seen := -1, ns, 0
	sample:
		for p, pths := range c.threads {
			for tid, h := range pths {
				if l := h.lastSeen(); l < oldest {
					vid, vtid, oldest = p, tid, l
				}
				if seen++; seen >= shedCandidates {
					break sample
				}
			}
		}
		if vtid >= 0 {
			c.evict(vid, vtid)
		}
	}
	return len(c.threads[id]) < c.maxPerProc && c.nThreads < c.maxThreads && c.nEntries < c.maxEntries
}

func (c *Catalog) evict(id scan.ProcessID, tid int) {
	ths := c.threads[id]
	c.nEntries -= ths[tid].len()
	delete(ths, tid)
	c.nThreads--
	if len(ths) == 0 {
		delete(c.threads, id)
	}
}

func (c *Catalog) removeThreads(id scan.ProcessID) {
	for _, h := range c.threads[id] {
		c.nEntries -= h.len()
	}
	c.nThreads -= len(c.threads[id])
	delete(c.threads, id)
}

package catalog

import (
	"maps"
	"slices"
	"time"

	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/threadctx"
)

// Default bounds of the thread records.
const (
	DefaultMaxThreadsPerProcess = 1024
	DefaultMaxThreads           = 65536
	// DefaultHistoryDepth is how many observations are kept per thread. Runs
	// of identical observations are one entry, so this counts span changes:
	// 4096 cover 41 s of a thread switching spans every 10 ms, enough for
	// samples that reach the collector seconds after they were taken.
	DefaultHistoryDepth = 4096
	// DefaultMaxEntries bounds the observations kept in total: with records
	// of at most 640 bytes (what the readers read) that is under 200 MiB in
	// the worst case, a few MiB for typical records.
	DefaultMaxEntries = 1 << 18
)

// ThreadRecord is a thread-context record seen on one thread. It is
// immutable once in the catalog.
type ThreadRecord struct {
	PID, TID int
	// SeenAt is when the record was first seen (for a run of identical
	// observations, the first of the run).
	SeenAt time.Time
	Record threadctx.Record
	// Attributes are the record's attributes named through the process's
	// threadlocal.attribute_key_map.
	Attributes map[string]string
	// Source is where the record was read: SourceOTEP4947 or SourceDD.
	// Consumers join records the same way whatever the source.
	Source string
	// sorted is Attributes sorted by key (SortedAttributes), set by the
	// catalog before the record becomes visible.
	sorted []Attribute
}

// Sources of thread records.
const (
	// SourceOTEP4947: the thread's otel_thread_ctx_v1 TLS record.
	SourceOTEP4947 = "otep4947"
	// SourceDD: the thread's slot of a Datadog DD_OTEL_CTX ring buffer
	// (trace and span ids only: no flags, no attributes).
	SourceDD = "dd_otel_ctx"
)

// SameContent reports whether two observations show the same record: the
// readers produce a new ThreadRecord per read, so identity is by content.
func SameContent(a, b *ThreadRecord) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Source == b.Source && a.Record.TraceID == b.Record.TraceID && a.Record.SpanID == b.Record.SpanID &&
		a.Record.TraceFlags == b.Record.TraceFlags && a.Record.Truncated == b.Record.Truncated &&
		slices.Equal(a.Record.Attrs, b.Record.Attrs) && maps.Equal(a.Attributes, b.Attributes)
}

// entry is a run of identical observations of one thread, from first to
// last (Unix ns). rec nil: the thread had no (valid) record then. The exact
// flags say whether the observation at first / last was taken at a
// profiler's sample moment (it vouches for that sample alone).
type entry struct {
	first, last           int64
	rec                   *ThreadRecord
	firstExact, lastExact bool
}

// history is a ring of a thread's entries, oldest at head, in time order.
// It grows on demand up to the depth, so an idle thread costs one entry.
type history struct {
	ents []entry
	head int
}

func (h *history) len() int        { return len(h.ents) }
func (h *history) at(i int) *entry { return &h.ents[(h.head+i)%len(h.ents)] }
func (h *history) latest() *entry  { return h.at(len(h.ents) - 1) }
func (h *history) lastSeen() int64 { return h.latest().last }

// after returns the index of the first entry that started after ns (the
// entries are in time order), h.len() if none did.
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

// SetThreadLimits bounds the threads kept per process and in total (values
// < 1 keep the current bound).
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

// SetHistoryLimits bounds the entries kept per thread and in total (values
// < 1 keep the current bound). Shrinking applies as threads are observed.
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

// ThreadCount is the number of threads with a history.
func (c *Catalog) ThreadCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nThreads
}

// EntryCount is the number of observation entries held.
func (c *Catalog) EntryCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nEntries
}

// UpdateThreads records one snapshot of pid's live process taken at the
// SeenAt of its records (now when there are none); see UpdateThreadsFor.
func (c *Catalog) UpdateThreads(pid int, records []*ThreadRecord, unread []int) (dropped int) {
	at := time.Now()
	if len(records) > 0 {
		at = records[0].SeenAt
	}
	return c.UpdateThreadsAt(pid, at, records, unread)
}

// UpdateThreadsAt is UpdateThreadsFor for whichever process holds pid now.
func (c *Catalog) UpdateThreadsAt(pid int, at time.Time, records []*ThreadRecord, unread []int) (dropped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.procs[pid]
	if !ok {
		return 0
	}
	return c.updateThreads(p.ID, at.UnixNano(), records, unread)
}

// UpdateThreadsFor records one snapshot of the live process id taken at
// time at: each record is an observation of its thread; the threads listed
// in unread (they could not be stopped or read this time) are not observed;
// every other thread known of the process is observed without a record (its
// span ended, or it exited). The snapshot is dropped (ok false) unless id
// still holds its PID: a snapshot takes time, and the records of a process
// that exited meanwhile must not land on a successor. Observations beyond
// the bounds are dropped and counted.
func (c *Catalog) UpdateThreadsFor(id scan.ProcessID, at time.Time, records []*ThreadRecord, unread []int) (dropped int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, found := c.procs[id.PID]; !found || p.ID != id {
		return 0, false
	}
	return c.updateThreads(id, at.UnixNano(), records, unread), true
}

// updateThreads records one snapshot of id's threads; c.mu is held.
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

// ObserveFor records one observation of thread tid of the process id at
// time at: rec, or nil for "no record". exact says it was taken at a
// profiler's sample moment, on the sampled thread. It reports false when
// the observation was dropped: id no longer holds its PID (an exited id
// still takes observations made before its exit was noticed), the bounds
// are reached, or it is older than the thread's latest observation.
func (c *Catalog) ObserveFor(id scan.ProcessID, tid int, at time.Time, rec *ThreadRecord, exact bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns := at.UnixNano()
	if !c.accepts(id, ns) {
		return false
	}
	return c.observe(id, tid, ns, rec, exact)
}

// Observe is ObserveFor for whichever process holds pid now, not exact.
func (c *Catalog) Observe(pid, tid int, at time.Time, rec *ThreadRecord) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.procs[pid]
	if !ok {
		return false
	}
	return c.observe(p.ID, tid, at.UnixNano(), rec, false)
}

func (c *Catalog) observe(id scan.ProcessID, tid int, ns int64, rec *ThreadRecord, exact bool) bool {
	h := c.threads[id][tid]
	if h == nil {
		if rec == nil {
			// Nothing known and still nothing: an entry would only say
			// "no span", which is what an unknown thread means anyway.
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
		// Out of order (samples of one thread come in order, so this is a
		// late snapshot): the history only moves forward.
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

// push appends e, overwriting the oldest entry when the thread is at its
// depth. At the total bound the thread still grows if a thread with at
// least two more entries gives up its oldest one, so that the entries
// spread over the threads instead of staying with the first ones.
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

// shedCandidates bounds the threads looked at to find an entry to shed or
// a thread to evict (map iteration starts at a random place, so this is
// a random sample, as in approximated LRU caches).
const shedCandidates = 64

// shedEntry drops the oldest entry of a thread holding more than keep
// entries, among a sample of threads; it reports whether it found one.
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

// linearize puts the entries in order from index 0, without the oldest drop.
func (h *history) linearize(drop int) {
	out := make([]entry, 0, len(h.ents)-drop+1)
	for i := drop; i < len(h.ents); i++ {
		out = append(out, *h.at(i))
	}
	h.ents, h.head = out, 0
}

// makeRoom lets one more thread of id in. At the entry bound a thread with
// several entries gives up its oldest. At a thread bound the thread
// observed least recently, if before ns, is evicted (threads exit without
// telling the sampler, so the oldest is most likely gone): among id's
// threads for the per-process bound, among a sample of all threads for the
// total.
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

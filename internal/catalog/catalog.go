// Package catalog is the in-memory state a processctx receiver shares with
// the processors of the same collector: the process contexts it tracks, by
// PID, and a short history of the thread-context records (OTEP 4947) seen on
// each of their threads, by PID and TID, so that a sample taken at time t
// can be matched with the span its thread had at t.
//
// The receiver is the only writer; readers take a read lock for one lookup.
package catalog

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"

	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/threadctx"
)

// Default bounds of the thread records.
const (
	DefaultMaxThreadsPerProcess = 1024
	DefaultMaxThreads           = 65536
	// DefaultHistoryDepth is how many observations are kept per thread. Runs
	// of identical observations are one entry, so this counts span changes:
	// 4096 cover 41 s of a thread switching spans every 10 ms. A profiler
	// reports its samples seconds after it took them (the OTel eBPF
	// profiler every 5 s), so the history must reach back that far for a
	// busy thread: at 64 entries a sample older than 0.64 s of 10 ms spans
	// found nothing. DefaultMaxEntries still bounds the total.
	DefaultHistoryDepth = 4096
	// DefaultMaxEntries bounds the observations kept in total: with records
	// of at most 640 bytes (what the readers read) that is under 200 MiB in
	// the worst case, a few MiB for typical records.
	DefaultMaxEntries = 1 << 18
)

// Catalog holds the current process contexts of one receiver.
type Catalog struct {
	mu    sync.RWMutex
	procs map[int]*scan.Process
	// threads holds, per PID, the recent observations of each thread.
	threads    map[int]map[int]*history
	nThreads   int
	nEntries   int
	maxPerProc int
	maxThreads int
	depth      int
	maxEntries int
	// attrSets shares the sorted attributes of records with equal ones
	// (prepare).
	attrSets map[string][]Attribute
}

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

// sameContent reports whether two observations show the same record: the
// readers produce a new ThreadRecord per read, so identity is by content.
func sameContent(a, b *ThreadRecord) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Source == b.Source && a.Record.TraceID == b.Record.TraceID && a.Record.SpanID == b.Record.SpanID &&
		a.Record.TraceFlags == b.Record.TraceFlags && a.Record.Truncated == b.Record.Truncated &&
		slices.Equal(a.Record.Attrs, b.Record.Attrs) && maps.Equal(a.Attributes, b.Attributes)
}

// entry is a run of identical observations of one thread, from first to
// last (Unix ns). rec nil: the thread had no (valid) record then.
type entry struct {
	first, last int64
	rec         *ThreadRecord
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

// New returns an empty catalog with the default thread bounds.
func New() *Catalog {
	return &Catalog{
		procs:      map[int]*scan.Process{},
		threads:    map[int]map[int]*history{},
		maxPerProc: DefaultMaxThreadsPerProcess,
		maxThreads: DefaultMaxThreads,
		depth:      DefaultHistoryDepth,
		maxEntries: DefaultMaxEntries,
		attrSets:   map[string][]Attribute{},
	}
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

// Thread returns the latest record seen on thread tid of process pid and
// when it was seen; ok is false when the thread is unknown or its latest
// observation is that it has no record. The record is shared: do not
// modify it.
func (c *Catalog) Thread(pid, tid int) (rec *ThreadRecord, seenAt time.Time, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	h, found := c.threads[pid][tid]
	if !found || h.current() == nil {
		return nil, time.Time{}, false
	}
	e := h.latest()
	return e.rec, time.Unix(0, e.last), true
}

// Observation is a run of identical observations of one thread.
type Observation struct {
	// Record is nil when the thread had no (valid) record: no active span.
	Record *ThreadRecord
	// First and Last bound the run: every observation of the thread between
	// them showed Record.
	First, Last time.Time
}

// ThreadAt returns the record thread tid of pid had at time t: that of the
// latest observation at or before t. rec is nil with ok true when that
// observation was "no record" (a NULL or invalid slot: no span then); ok
// is false when nothing is known at or before t (t precedes the history
// kept, or the thread is unknown). seenAt is the latest observation time at
// or before t that vouches for the answer: the run's last observation when
// it is before t, else its first. The caller judges staleness from t-seenAt.
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

// ObservationAt returns the run of observations in effect at t (the latest
// that started at or before t).
func (c *Catalog) ObservationAt(pid, tid int, t time.Time) (Observation, bool) {
	ns := t.UnixNano()
	c.mu.RLock()
	defer c.mu.RUnlock()
	h, found := c.threads[pid][tid]
	if !found {
		return Observation{}, false
	}
	i := h.after(ns)
	if i == 0 {
		return Observation{}, false
	}
	e := h.at(i - 1)
	return Observation{Record: e.rec, First: time.Unix(0, e.first), Last: time.Unix(0, e.last)}, true
}

// History returns the observations kept of one thread, oldest first.
func (c *Catalog) History(pid, tid int) []Observation {
	c.mu.RLock()
	defer c.mu.RUnlock()
	h, ok := c.threads[pid][tid]
	if !ok {
		return nil
	}
	out := make([]Observation, h.len())
	for i := range out {
		e := h.at(i)
		out[i] = Observation{Record: e.rec, First: time.Unix(0, e.first), Last: time.Unix(0, e.last)}
	}
	return out
}

// Threads returns the current records of pid (threads whose latest
// observation is a record), in no particular order.
func (c *Catalog) Threads(pid int) []*ThreadRecord {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*ThreadRecord, 0, len(c.threads[pid]))
	for _, h := range c.threads[pid] {
		if r := h.current(); r != nil {
			out = append(out, r)
		}
	}
	return out
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

// UpdateThreads records one snapshot of pid (the ptrace reader) taken at
// the SeenAt of its records (now when there are none); see UpdateThreadsAt.
func (c *Catalog) UpdateThreads(pid int, records []*ThreadRecord, unread []int) (dropped int) {
	at := time.Now()
	if len(records) > 0 {
		at = records[0].SeenAt
	}
	return c.UpdateThreadsAt(pid, at, records, unread)
}

// UpdateThreadsAt records one snapshot of pid taken at time at: each record
// is an observation of its thread; the threads listed in unread (they could
// not be stopped or read this time) are not observed; every other thread
// known of pid is observed without a record (its span ended, or it exited:
// either way no span from then on). Observations beyond the bounds are
// dropped; the number dropped is returned. Nothing is recorded for a process
// not in the catalog (lost meanwhile).
func (c *Catalog) UpdateThreadsAt(pid int, at time.Time, records []*ThreadRecord, unread []int) (dropped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.procs[pid]; !ok {
		c.removeThreads(pid)
		return 0
	}
	return c.updateThreads(pid, at.UnixNano(), records, unread)
}

// UpdateThreadsFor is UpdateThreadsAt for the process identity id: the
// snapshot is dropped (ok false) unless the catalog's process with id.PID is
// still that identity. A snapshot takes time; if the PID was reused while
// it ran, the old process's records must not land on the new one.
func (c *Catalog) UpdateThreadsFor(id scan.ProcessID, at time.Time, records []*ThreadRecord, unread []int) (dropped int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, found := c.procs[id.PID]; !found || p.ID != id {
		return 0, false
	}
	return c.updateThreads(id.PID, at.UnixNano(), records, unread), true
}

// updateThreads records one snapshot of pid's threads; c.mu is held.
func (c *Catalog) updateThreads(pid int, ns int64, records []*ThreadRecord, unread []int) (dropped int) {
	seen := make(map[int]bool, len(records)+len(unread))
	for _, tid := range unread {
		seen[tid] = true
	}
	for _, r := range records {
		if seen[r.TID] {
			continue
		}
		seen[r.TID] = true
		if !c.observe(pid, r.TID, ns, r) {
			dropped++
		}
	}
	for tid, h := range c.threads[pid] {
		if !seen[tid] && h.current() != nil {
			c.observe(pid, tid, ns, nil)
		}
	}
	return dropped
}

// ObserveFor is Observe for the process identity id: the observation is
// dropped unless the catalog's process with id.PID is that identity (a
// sample of a PID's previous owner never lands on its successor).
func (c *Catalog) ObserveFor(id scan.ProcessID, tid int, at time.Time, rec *ThreadRecord) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.procs[id.PID]; !ok || p.ID != id {
		return false
	}
	return c.observe(id.PID, tid, at.UnixNano(), rec)
}

// Observe records one observation of thread tid of pid at time at (the
// eBPF sampler): rec, or nil for "no record". It reports false when the
// observation was dropped: the process is not in the catalog, the bounds
// are reached, or it is older than the thread's latest observation.
func (c *Catalog) Observe(pid, tid int, at time.Time, rec *ThreadRecord) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.procs[pid]; !ok {
		return false
	}
	return c.observe(pid, tid, at.UnixNano(), rec)
}

func (c *Catalog) observe(pid, tid int, ns int64, rec *ThreadRecord) bool {
	ths := c.threads[pid]
	h := ths[tid]
	if h == nil {
		if rec == nil {
			// Nothing known and still nothing: an entry would only say
			// "no span", which is what an unknown thread means anyway.
			return true
		}
		if !c.makeRoom(pid, ns) {
			return false
		}
		ths = c.threads[pid] // an eviction may have removed the process's last thread
		if ths == nil {
			ths = map[int]*history{}
			c.threads[pid] = ths
		}
		h = &history{ents: make([]entry, 0, 4)}
		ths[tid] = h
		c.nThreads++
		c.prepare(rec)
		h.ents = append(h.ents, entry{first: ns, last: ns, rec: rec})
		c.nEntries++
		return true
	}
	last := h.latest()
	if ns < last.last {
		// Out of order (samples of one thread come in order, so this is a
		// late snapshot): the history only moves forward.
		return false
	}
	if sameContent(last.rec, rec) {
		last.last = ns
		return true
	}
	c.prepare(rec)
	c.push(h, entry{first: ns, last: ns, rec: rec})
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

// makeRoom lets one more thread of pid in. At the entry bound a thread
// with several entries gives up its oldest. At a thread bound the thread
// observed least recently, if before ns, is evicted (threads exit without
// telling the sampler, so the oldest is most likely gone): among pid's
// threads for the per-process bound, among a sample of all threads for the
// total.
func (c *Catalog) makeRoom(pid int, ns int64) bool {
	if c.nEntries >= c.maxEntries {
		c.shedEntry(1)
	}
	ths := c.threads[pid]
	if len(ths) >= c.maxPerProc {
		victim, oldest := -1, ns
		for tid, h := range ths {
			if l := h.lastSeen(); l < oldest {
				victim, oldest = tid, l
			}
		}
		if victim >= 0 {
			c.evict(pid, victim)
		}
	} else if c.nThreads >= c.maxThreads {
		vpid, vtid, oldest, seen := -1, -1, ns, 0
	sample:
		for p, pths := range c.threads {
			for tid, h := range pths {
				if l := h.lastSeen(); l < oldest {
					vpid, vtid, oldest = p, tid, l
				}
				if seen++; seen >= shedCandidates {
					break sample
				}
			}
		}
		if vpid >= 0 {
			c.evict(vpid, vtid)
		}
	}
	return len(c.threads[pid]) < c.maxPerProc && c.nThreads < c.maxThreads && c.nEntries < c.maxEntries
}

func (c *Catalog) evict(pid, tid int) {
	ths := c.threads[pid]
	c.nEntries -= ths[tid].len()
	delete(ths, tid)
	c.nThreads--
	if len(ths) == 0 {
		delete(c.threads, pid)
	}
}

func (c *Catalog) removeThreads(pid int) {
	for _, h := range c.threads[pid] {
		c.nEntries -= h.len()
	}
	c.nThreads -= len(c.threads[pid])
	delete(c.threads, pid)
}

// Process returns the context of pid, if it publishes one. The returned
// value is immutable. A caller holding a start time for pid must compare it
// with Process.ID.StartTicks / CreationTime: PIDs are reused.
func (c *Catalog) Process(pid int) (*scan.Process, bool) {
	c.mu.RLock()
	p, ok := c.procs[pid]
	c.mu.RUnlock()
	return p, ok
}

// Processes returns the processes in the catalog, in no particular order.
func (c *Catalog) Processes() []*scan.Process {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*scan.Process, 0, len(c.procs))
	for _, p := range c.procs {
		out = append(out, p)
	}
	return out
}

// Len is the number of processes in the catalog.
func (c *Catalog) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.procs)
}

// Apply records the scanner's events.
func (c *Catalog) Apply(events []scan.Event) {
	if len(events) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range events {
		pid := e.Process.ID.PID
		switch e.Kind {
		case scan.Found, scan.Updated:
			if cur, ok := c.procs[pid]; ok && cur.ID != e.Process.ID {
				// A new process with a reused PID: the threads were another's.
				c.removeThreads(pid)
			}
			c.procs[pid] = e.Process
		case scan.Lost:
			// Only forget the identity that was lost: a successor with the
			// same PID may already have been found in the same scan.
			if cur, ok := c.procs[pid]; ok && cur.ID == e.Process.ID {
				delete(c.procs, pid)
				c.removeThreads(pid)
			}
		}
	}
}

var (
	registryMu sync.Mutex
	registry   = map[component.ID]*Catalog{}
)

// Register makes c findable by the receiver's component ID.
func Register(id component.ID, c *Catalog) error {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, ok := registry[id]; ok {
		return fmt.Errorf("catalog for %q already registered", id)
	}
	registry[id] = c
	return nil
}

// Unregister removes the catalog of id, if c is the one registered.
func Unregister(id component.ID, c *Catalog) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if registry[id] == c {
		delete(registry, id)
	}
}

// Lookup finds the catalog of a running receiver.
func Lookup(id component.ID) (*Catalog, bool) {
	registryMu.Lock()
	defer registryMu.Unlock()
	c, ok := registry[id]
	return c, ok
}

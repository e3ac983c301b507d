// Package catalog is the in-memory state a processctx receiver shares with
// the processors of the same collector: the process contexts it tracks, by
// PID, and the latest thread-context record (OTEP 4947) seen on each of their
// threads, by PID and TID.
//
// The receiver is the only writer; readers take a read lock for one lookup.
package catalog

import (
	"fmt"
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
)

// Catalog holds the current process contexts of one receiver.
type Catalog struct {
	mu    sync.RWMutex
	procs map[int]*scan.Process
	// threads holds, per PID, the latest record of each thread.
	threads    map[int]map[int]*ThreadRecord
	nThreads   int
	maxPerProc int
	maxThreads int
}

// ThreadRecord is the latest thread-context record seen on one thread. It
// is immutable once in the catalog.
type ThreadRecord struct {
	PID, TID int
	SeenAt   time.Time
	Record   threadctx.Record
	// Attributes are the record's attributes named through the process's
	// threadlocal.attribute_key_map.
	Attributes map[string]string
}

// New returns an empty catalog with the default thread bounds.
func New() *Catalog {
	return &Catalog{
		procs:      map[int]*scan.Process{},
		threads:    map[int]map[int]*ThreadRecord{},
		maxPerProc: DefaultMaxThreadsPerProcess,
		maxThreads: DefaultMaxThreads,
	}
}

// SetThreadLimits bounds the thread records kept per process and in total
// (values < 1 keep the current bound).
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

// Thread returns the latest record seen on thread tid of process pid and
// when it was seen. The record is shared: do not modify it.
func (c *Catalog) Thread(pid, tid int) (rec *ThreadRecord, seenAt time.Time, ok bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if rec, ok = c.threads[pid][tid]; !ok {
		return nil, time.Time{}, false
	}
	return rec, rec.SeenAt, true
}

// Threads returns the thread records of pid, in no particular order.
func (c *Catalog) Threads(pid int) []*ThreadRecord {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*ThreadRecord, 0, len(c.threads[pid]))
	for _, r := range c.threads[pid] {
		out = append(out, r)
	}
	return out
}

// ThreadCount is the number of thread records held.
func (c *Catalog) ThreadCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nThreads
}

// UpdateThreads records one snapshot of pid: records replaces what was known
// of its threads, except that the threads listed in unread (they could not
// be stopped or read this time) keep their previous record. Threads seen
// without a record lose theirs: the latest observation is that they have
// none. Records beyond the per-process or total bound are dropped; the
// number dropped is returned. Nothing is recorded for a process not in the
// catalog (lost meanwhile).
func (c *Catalog) UpdateThreads(pid int, records []*ThreadRecord, unread []int) (dropped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.procs[pid]; !ok {
		c.removeThreads(pid)
		return 0
	}
	old := c.threads[pid]
	c.nThreads -= len(old)
	next := make(map[int]*ThreadRecord, len(records))
	add := func(r *ThreadRecord) {
		if _, dup := next[r.TID]; !dup && (len(next) >= c.maxPerProc || c.nThreads+len(next) >= c.maxThreads) {
			dropped++
			return
		}
		next[r.TID] = r
	}
	for _, tid := range unread {
		if r, ok := old[tid]; ok {
			add(r)
		}
	}
	for _, r := range records {
		add(r)
	}
	if len(next) == 0 {
		delete(c.threads, pid)
		return dropped
	}
	c.threads[pid] = next
	c.nThreads += len(next)
	return dropped
}

func (c *Catalog) removeThreads(pid int) {
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

// Package catalog is the in-memory state a processctx receiver shares with
// the processors of the same collector: the process contexts it tracks, by
// PID, and a history of the thread-context records seen on each of their
// threads, by process identity and TID, so that a sample taken at time t
// can be matched with the span its thread had at t.
//
// Profiles arrive seconds after their samples were taken, often after the
// process exited, so an exited process and its histories stay joinable for
// a retention period. Histories are keyed by process identity (PID and
// start time): a reused PID never shows one process's threads to another.
//
// The receiver is the only writer; readers take a read lock for one lookup.
package catalog

import (
	"sync"
	"time"

	"github.com/otelctx/otelctx/internal/scan"
)

// Defaults of the retention of exited processes.
const (
	// DefaultRetention covers two report intervals of the OTel eBPF
	// profiler (5 s each) and exporter queueing, with margin.
	DefaultRetention = time.Minute
	// DefaultMaxRetained bounds the exited processes kept at once; past it
	// the one that exited first goes.
	DefaultMaxRetained = 4096
)

// CreationSlack is how much earlier than a process's creation time data may
// be and still be the process's: creation times have the 10 ms resolution
// of /proc/PID/stat's start time (rounded down).
const CreationSlack = 10 * time.Millisecond

// Catalog holds the current and recently exited process contexts of one
// receiver and their threads' histories.
type Catalog struct {
	mu sync.RWMutex
	// procs are the live processes, by PID.
	procs map[int]*scan.Process
	// exited are the retained exited processes, by PID, oldest first.
	exited      map[int][]exitedProc
	nExited     int
	retention   time.Duration
	maxRetained int
	now         func() time.Time

	threads    map[scan.ProcessID]map[int]*history
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

// exitedProc is a process that was lost at exitedAt (Unix ns): data taken
// after that is not its.
type exitedProc struct {
	p        *scan.Process
	exitedAt int64
}

// New returns an empty catalog with the default bounds.
func New() *Catalog {
	return &Catalog{
		procs:       map[int]*scan.Process{},
		exited:      map[int][]exitedProc{},
		retention:   DefaultRetention,
		maxRetained: DefaultMaxRetained,
		now:         time.Now,
		threads:     map[scan.ProcessID]map[int]*history{},
		maxPerProc:  DefaultMaxThreadsPerProcess,
		maxThreads:  DefaultMaxThreads,
		depth:       DefaultHistoryDepth,
		maxEntries:  DefaultMaxEntries,
		attrSets:    map[string][]Attribute{},
	}
}

// SetRetention sets how long an exited process and its thread histories
// stay joinable, and how many are kept at most (values < 0 keep the current
// setting; a retention of 0 forgets a process when it is lost).
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

// Process returns the live process with pid, if it publishes a context.
// The returned value is immutable. A caller holding a time for data of pid
// should use ProcessAt: PIDs are reused.
func (c *Catalog) Process(pid int) (*scan.Process, bool) {
	c.mu.RLock()
	p, ok := c.procs[pid]
	c.mu.RUnlock()
	return p, ok
}

// Lookup outcomes of ProcessAt.
type Lookup uint8

const (
	// Found: the process that held the PID at the time.
	Found Lookup = iota
	// NoProcess: no process with the PID is known.
	NoProcess
	// OtherHolder: processes with the PID are known, but none held it at
	// the time (the data is a previous or later holder's).
	OtherHolder
)

// ProcessAt returns the process, live or exited within the retention, that
// held pid at t (Unix ns): the latest created by t (within CreationSlack),
// if it had not exited before t. t = 0 (unknown) means the live process.
func (c *Catalog) ProcessAt(pid int, t int64) (*scan.Process, Lookup) {
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
			if t <= e.exitedAt {
				return e.p, Found
			}
			break // taken after it exited: a later holder's
		}
	}
	return nil, OtherHolder
}

func createdBy(p *scan.Process, t int64) bool {
	return p.CreationTime.IsZero() || t >= p.CreationTime.Add(-CreationSlack).UnixNano()
}

// Processes returns the live processes, in no particular order.
func (c *Catalog) Processes() []*scan.Process {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*scan.Process, 0, len(c.procs))
	for _, p := range c.procs {
		out = append(out, p)
	}
	return out
}

// Len is the number of live processes.
func (c *Catalog) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.procs)
}

// RetainedCount is the number of exited processes kept.
func (c *Catalog) RetainedCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nExited
}

// Apply records the scanner's events and forgets exited processes past
// their retention; call it every round, with or without events.
func (c *Catalog) Apply(events []scan.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now().UnixNano()
	for _, e := range events {
		pid := e.Process.ID.PID
		switch e.Kind {
		case scan.Found, scan.Updated:
			if cur, ok := c.procs[pid]; ok && cur.ID != e.Process.ID {
				// Replaced without a Lost: the previous holder exited no
				// later than its successor was created.
				at := now
				if !e.Process.CreationTime.IsZero() {
					at = min(at, e.Process.CreationTime.UnixNano())
				}
				c.retire(cur, at)
			}
			// Found again after a Lost (unpublished and published again):
			// the same identity is live, not retained any more.
			c.unretire(e.Process.ID)
			c.procs[pid] = e.Process
		case scan.Lost:
			// Only the identity that was lost: a successor with the same
			// PID may already have been found in the same round.
			if cur, ok := c.procs[pid]; ok && cur.ID == e.Process.ID {
				delete(c.procs, pid)
				c.retire(cur, now)
			}
		}
	}
	c.expire(now)
}

// retire moves p to the exited processes; c.mu is held.
func (c *Catalog) retire(p *scan.Process, at int64) {
	if c.retention <= 0 || c.maxRetained == 0 {
		c.forget(p.ID)
		return
	}
	c.exited[p.ID.PID] = append(c.exited[p.ID.PID], exitedProc{p: p, exitedAt: at})
	c.nExited++
	for c.nExited > c.maxRetained {
		c.dropOldestExited()
	}
}

// unretire removes id from the exited processes without touching its
// threads, which are the live process's again; c.mu is held.
func (c *Catalog) unretire(id scan.ProcessID) {
	gone := c.exited[id.PID]
	for i, e := range gone {
		if e.p.ID == id {
			gone = append(gone[:i], gone[i+1:]...)
			c.nExited--
			break
		}
	}
	if len(gone) == 0 {
		delete(c.exited, id.PID)
	} else {
		c.exited[id.PID] = gone
	}
}

// forget drops the threads of an exited process, unless its identity is
// live again; c.mu is held.
func (c *Catalog) forget(id scan.ProcessID) {
	if p, ok := c.procs[id.PID]; ok && p.ID == id {
		return
	}
	c.removeThreads(id)
}

// expire forgets the exited processes lost more than the retention before
// now; c.mu is held.
func (c *Catalog) expire(now int64) {
	if c.nExited == 0 {
		return
	}
	limit := now - int64(c.retention)
	for pid, gone := range c.exited {
		keep := gone[:0]
		for _, e := range gone {
			if e.exitedAt >= limit && c.retention > 0 {
				keep = append(keep, e)
				continue
			}
			c.forget(e.p.ID)
			c.nExited--
		}
		clear(gone[len(keep):])
		if len(keep) == 0 {
			delete(c.exited, pid)
		} else {
			c.exited[pid] = keep
		}
	}
}

// dropOldestExited forgets the exited process lost first; c.mu is held. It
// walks every PID's list: only called when the bound is exceeded, which
// default settings make rare.
func (c *Catalog) dropOldestExited() {
	vpid, oldest := -1, int64(0)
	for pid, gone := range c.exited {
		if vpid < 0 || gone[0].exitedAt < oldest {
			vpid, oldest = pid, gone[0].exitedAt
		}
	}
	if vpid < 0 {
		return
	}
	gone := c.exited[vpid]
	c.forget(gone[0].p.ID)
	c.nExited--
	if len(gone) == 1 {
		delete(c.exited, vpid)
	} else {
		c.exited[vpid] = append(gone[:0:0], gone[1:]...)
	}
}

// accepts reports whether observations of id taken at ns (Unix ns) may be
// recorded: id holds its PID, or it exited (was noticed to exit) after ns,
// as the last samples in flight when the exit is noticed are; c.mu is held.
func (c *Catalog) accepts(id scan.ProcessID, ns int64) bool {
	if p, ok := c.procs[id.PID]; ok {
		return p.ID == id
	}
	for _, e := range c.exited[id.PID] {
		if e.p.ID == id {
			return ns <= e.exitedAt
		}
	}
	return false
}

// idOf is the identity whose threads a PID-only query means: the live
// process, else the latest exited one; c.mu is held.
func (c *Catalog) idOf(pid int) (scan.ProcessID, bool) {
	if p, ok := c.procs[pid]; ok {
		return p.ID, true
	}
	if gone := c.exited[pid]; len(gone) > 0 {
		return gone[len(gone)-1].p.ID, true
	}
	return scan.ProcessID{}, false
}

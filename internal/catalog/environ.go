// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/pidclock"
	"github.com/otelctx/otelctx/internal/publisher"
)

// The environment as a second source of a process's resource: the
// resource an OpenTelemetry SDK takes from OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, read (EnvReader: discovery, package envscan)
// once per process identity (PID and start time), for the PIDs data names. A process that
// publishes a context keeps its published resource; the environment fills
// the keys it lacks. A process with neither variable gets nothing.

// DefaultMaxEnvProcesses bounds the environments kept (one entry per PID,
// whether or not it named a resource, each with a pidfd), and
// DefaultMaxEnvMemory what they hold (16 MiB: 4,096 entries of up to
// 64 KiB of variables would hold 256 MiB). Both are shared per user (the
// process's publisher.Process.Owner): past a bound the user holding the
// most gives up its least recently confirmed entry, as long as it holds
// more than the newcomer's user would, else the newcomer's user does.
const (
	DefaultMaxEnvProcesses = 4096
	DefaultMaxEnvMemory    = 16 << 20
)

// envEntrySize is what an entry holds besides its Process.
var envEntrySize = int(unsafe.Sizeof(envEntry{}))

// EnvStats counts what the environment source did, since the start.
type EnvStats struct {
	// Reads: environments read; Named: of them, those that named a
	// resource.
	Reads, Named int64
	// Failed: reads that timed out, were refused (too many blocked), or
	// failed otherwise (the process left, its PID changed hands).
	TimedOut, Refused, Failed int64
	// Invalid: variables dropped (malformed, oversized, too many keys).
	Invalid int64
	// Evicted: entries dropped for the DefaultMaxEnvProcesses or
	// DefaultMaxEnvMemory bound.
	Evicted int64
	// Memory is what the entries hold now (bytes), MaxMemory its bound.
	Memory, MaxMemory int64
}

// EnvReader is how the environment source reads the host (package
// envscan reads /proc): discovery finds, the catalog keeps what it found.
type EnvReader interface {
	// Self is otelctx's own PID.
	Self() int
	// Holder is the start ticks and environment area (where its strings
	// are: an exec moves them) of pid's holder now; an error: none.
	Holder(pid int) (startTicks uint64, envArea [2]uint64, err error)
	// Read reads the environment of pid, held by the process started at
	// startTicks.
	Read(pid int, startTicks uint64) publisher.EnvironmentRead
	// PIDClock is the PID allocator's position now, PIDMax where it wraps
	// (0: unknown).
	PIDClock() pidclock.Reading
	PIDMax() int
}

type envSource struct {
	reader   EnvReader
	self     int // otelctx's own PID
	max      int
	maxBytes int
	now      func() time.Time

	mu    sync.Mutex
	byPID map[int]*envEntry
	// shares: what each user holds of the bounds; bytes: their sum.
	shares map[int]*envShare
	bytes  int
	// absent: PIDs no process held when last looked up (Unix ns): data
	// taken by then cannot be of a process that could still be read, so
	// it costs no look-up again.
	absent map[int]int64
	// pidMax and the allocator's position (clockAt: when read, Unix ns)
	// tell whether an exited process's PID may have changed hands since it
	// was last seen (package pidclock).
	pidMax  int
	clock   pidclock.Reading
	clockAt int64
	// closed: CloseEnvironment was called; nothing more is kept open.
	closed bool

	reads, named, timedOut, refused, failed, invalid, evicted atomic.Int64
}

// envShare is what one user's entries hold.
type envShare struct{ n, bytes int }

// envEntry is what the environment of one process identity gave.
type envEntry struct {
	// owner is the process's user (package owner), cost what the entry
	// holds of DefaultMaxEnvMemory.
	owner, cost int
	// proc: the process as the environment names it (nil: it names
	// nothing): FromEnvironment, its Context.Resource the attributes.
	proc *publisher.Process
	id   publisher.ProcessID
	// checked: when (Unix ns) the PID was last seen held by id; seen:
	// the PID allocator's position read before that.
	checked int64
	seen    pidclock.Reading
	// exit tells whether the process exited without a /proc read (nil:
	// nothing can, or it was closed). gone: it said the process exited.
	exit publisher.ExitWatch
	gone bool
	// retryAt (Unix ns, 0: never): the read failed (timed out, refused):
	// the identity gets nothing until then, and is read again after.
	retryAt int64
	// env is where the environment was when it was read, last seen there
	// at envSeen (Unix ns); execAt: when to look again whether the process
	// exec'd (a new image has new environment strings, same identity).
	env             [2]uint64
	envSeen, execAt int64
	// imageFrom (Unix ns, 0: the process's start): the entry is of an
	// image exec'd after this; data up to it may be the earlier image's.
	imageFrom int64
	// exitedBy (Unix ns, 0: not seen exited): data taken up to it is the
	// process's (as a publisher's context is retained, its resource
	// outlives it for the samples in flight): when its exit was seen if
	// its PID cannot have been handed out since it was last seen alive,
	// the start of the PID's next holder if no other can have held it in
	// between, else when it was last seen alive (markExited).
	exitedBy int64
	// prev: the PID's previous holder, exited (its data arrives late).
	prev *envEntry
}

// envRetry is how long a process whose environment read timed out or was
// refused gets nothing before it is read again: a process that blocks
// reads costs a deadline per envRetry, not per message.
const envRetry = 10 * time.Second

// envExecCheck is how often a process's stat is read again to tell
// whether it exec'd: a process sampled between fork and exec (a shell, a
// supervisor, env(1)) gets its program's environment this long after the
// exec, at the cost of one stat read per PID the data names per period.
const envExecCheck = 10 * time.Second

// alive reports whether ent's process has not exited (false without an
// exit watch); an exited one's watch is closed.
func (ent *envEntry) alive() bool {
	if ent.exit == nil {
		return false
	}
	alive, exited := ent.exit.Alive()
	if !alive {
		ent.gone, ent.exit = exited, nil
	}
	return alive
}

func (ent *envEntry) close() {
	if ent.exit != nil {
		ent.exit.Close()
		ent.exit = nil
	}
}

// EnableEnvironment turns the environment source on, reading through r;
// maxProcesses <= 0 takes DefaultMaxEnvProcesses.
func (c *Catalog) EnableEnvironment(r EnvReader, maxProcesses int) {
	if maxProcesses <= 0 {
		maxProcesses = DefaultMaxEnvProcesses
	}
	c.env.Store(&envSource{
		reader:   r,
		self:     r.Self(),
		max:      maxProcesses,
		maxBytes: DefaultMaxEnvMemory,
		now:      time.Now,
		byPID:    map[int]*envEntry{},
		shares:   map[int]*envShare{},
		absent:   map[int]int64{},
		pidMax:   r.PIDMax(),
	})
}

// CloseEnvironment turns the environment source off and closes what it
// holds (each entry's exit watch: a pidfd); a look-up under way keeps
// nothing it opens. It may be called more than once.
func (c *Catalog) CloseEnvironment() {
	e := c.env.Swap(nil)
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	for _, ent := range e.byPID {
		ent.close()
	}
}

// EnvironmentEnabled reports whether the environment source is on.
func (c *Catalog) EnvironmentEnabled() bool { return c.env.Load() != nil }

// EnvStats returns the environment source's counts (zero when off).
func (c *Catalog) EnvStats() EnvStats {
	e := c.env.Load()
	if e == nil {
		return EnvStats{}
	}
	s := EnvStats{
		Reads: e.reads.Load(), Named: e.named.Load(), TimedOut: e.timedOut.Load(), Refused: e.refused.Load(),
		Failed: e.failed.Load(), Invalid: e.invalid.Load(), Evicted: e.evicted.Load(),
	}
	s.Memory, s.MaxMemory = e.memory()
	return s
}

// SetEnvironmentMemory bounds what the environment entries hold, in bytes
// (DefaultMaxEnvMemory until set; <= 0 keeps it). Call it after
// EnableEnvironment, before lookups.
func (c *Catalog) SetEnvironmentMemory(bytes int) {
	if e := c.env.Load(); e != nil && bytes > 0 {
		e.mu.Lock()
		e.maxBytes = bytes
		e.mu.Unlock()
	}
}

// Environment returns the attributes a publisher's environment names
// (nil: none, or the source is off), read once for its identity; a process
// known only by its environment has them as its resource (nil here).
func (c *Catalog) Environment(p *publisher.Process) []processctx.Attribute {
	if p.FromEnvironment {
		return nil
	}
	e := c.env.Load()
	if e == nil {
		return nil
	}
	ent, _ := e.current(p.ID.PID, 0, nil)
	if ent == nil || ent.id != p.ID || ent.proc == nil {
		return nil
	}
	return ent.proc.Context.Resource.Attributes
}

// envProcessFor is ProcessFor for a PID the catalog does not hold: the
// process that holds pid now, if it held it over [from, to] (it was
// created by from) and its environment names a resource.
func (c *Catalog) envProcessFor(pid int, from, to int64, budget *EnvBudget) (*publisher.Process, Lookup) {
	e := c.env.Load()
	if e == nil || pid <= 0 || pid == e.self {
		// otelctx's own environment configures it (OTEL_RESOURCE_ATTRIBUTES
		// for its own telemetry): it does not name its process.
		return nil, NoProcess
	}
	ent, over := e.current(pid, to, budget)
	if over {
		return nil, OverBudget
	}
	if ent == nil || ent.proc == nil {
		return nil, NoProcess
	}
	if from != 0 && (!createdBy(ent.proc, from) || from <= ent.imageFrom) {
		return nil, OtherHolder // data of an earlier holder of the PID, or of its image before an exec
	}
	return ent.proc, Found
}

// current returns the entry of the process that holds pid, known to hold
// it at t (Unix ns; 0: now): a cached entry confirmed at or after t is
// used as it is; otherwise the PID's holder is looked up, and its
// environment read when it is a new one, as budget allows (over: it did
// not). nil: no process, or its environment could not be read.
func (e *envSource) current(pid int, t int64, budget *EnvBudget) (*envEntry, bool) {
	ent, answered, over := e.cached(pid, t, budget)
	if answered || over {
		return ent, over
	}
	return e.lookUp(pid, t, ent), false
}

// cached answers from what is known without a /proc read (answered), or
// says that budget had no look-up left (over); else ent is the PID's entry
// to look up again, if any.
func (e *envSource) cached(pid int, t int64, budget *EnvBudget) (ent *envEntry, answered, over bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ent = e.byPID[pid]
	if ent != nil && t != 0 {
		if p := ent.prev; p != nil && t <= p.exitedBy {
			return p, true, false // taken before the PID changed hands
		}
		if t <= ent.checked || t <= ent.exitedBy {
			return ent, true, false
		}
	}
	if t != 0 && t <= e.absent[pid] {
		return nil, true, false // no process then that could be read now
	}
	var before pidclock.Reading
	if ent != nil {
		before = e.reading()
	}
	alive := ent != nil && ent.alive()
	if alive {
		if now := e.now().UnixNano(); now < ent.execAt {
			ent.checked, ent.seen = max(ent.checked, now), before
			return ent, true, false
		}
	}
	if !budget.take() {
		if alive {
			return ent, true, false // it still holds the PID; the exec check waits for a message with budget left
		}
		return nil, false, true
	}
	return ent, false, false
}

// lookUp reads who holds pid now, and its environment when it is a new
// process; ent is the PID's entry before.
func (e *envSource) lookUp(pid int, t int64, ent *envEntry) *envEntry {
	e.mu.Lock()
	before := e.reading()
	e.mu.Unlock()
	ticks, area, err := e.reader.Holder(pid)
	now := e.now().UnixNano()
	exited, exitedBy := e.markExited(ent, ticks, err == nil, now)
	// Data taken by the exit is the exited process's, whatever holds the
	// PID now.
	exitedAnswer := func(alt *envEntry) *envEntry {
		if exited != nil && t != 0 && t <= exitedBy {
			return exited
		}
		return alt
	}
	if err != nil {
		e.rememberAbsent(pid, now)
		return exitedAnswer(nil) // gone: what it did after the last check cannot be told from a successor's
	}
	var imageFrom int64
	if ent != nil && ent.id.StartTicks == ticks {
		same, from := e.sameImage(ent, area, now, before)
		if same {
			return ent
		}
		imageFrom = from
	}
	if exited != nil && ticks == exited.id.StartTicks {
		// Exited, not yet reaped (a zombie holds its PID and start time).
		return exitedAnswer(nil)
	}
	next := e.read(pid, ticks, now)
	if next == nil {
		return exitedAnswer(nil)
	}
	next.env, next.envSeen, next.execAt, next.imageFrom = area, now, now+int64(envExecCheck), imageFrom
	next.seen = before
	next.cost = envEntrySize + otelenvCost(next)
	e.store(pid, next)
	return exitedAnswer(next)
}

// sameImage tells whether ent's process (the PID's holder still) needs
// no new environment read (same), or from when its new image's
// environment holds.
func (e *envSource) sameImage(ent *envEntry, env [2]uint64, now int64, before pidclock.Reading) (same bool, imageFrom int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	quarantined := ent.retryAt != 0 && now < ent.retryAt
	moved := ent.env != env
	// At most one environment read per envExecCheck, whatever the area
	// does, and none while a failed read is quarantined: a process that
	// moves its area over slow pages costs one deadline per period.
	if quarantined || (!moved && ent.retryAt == 0) || (moved && now < ent.execAt) {
		ent.checked, ent.seen = max(ent.checked, now), before
		if !moved {
			ent.envSeen, ent.execAt = now, now+int64(envExecCheck)
		}
		return true, 0
	}
	if moved {
		return false, ent.envSeen // it exec'd after the old image was last seen
	}
	return false, ent.imageFrom
}

// store makes next the PID's entry, the previous one kept with it when
// its process exited.
func (e *envSource) store(pid int, next *envEntry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		next.close()
		return
	}
	delete(e.absent, pid)
	if old := e.byPID[pid]; old != nil {
		e.drop(old)
		if old.exitedBy != 0 && old.id != next.id {
			if old.prev != nil { // one previous holder kept, not a chain
				old.cost -= old.prev.cost
				old.prev = nil
			}
			next.prev = old
			next.cost += old.cost // held with next, charged with it
		}
	}
	e.makeRoom(next)
	e.byPID[pid] = next
	e.charge(next, 1)
}

// read reads the environment of pid, held by the process started at
// ticks.
func (e *envSource) read(pid int, ticks uint64, now int64) *envEntry {
	r := e.reader.Read(pid, ticks)
	id := publisher.ProcessID{PID: pid, StartTicks: ticks}
	switch r.Outcome {
	case publisher.EnvironmentTimedOut:
		e.timedOut.Add(1)
		return &envEntry{id: id, owner: r.Owner, checked: now, retryAt: now + int64(envRetry)}
	case publisher.EnvironmentRefused:
		e.refused.Add(1)
		return &envEntry{id: id, owner: r.Owner, checked: now, retryAt: now + int64(envRetry)}
	case publisher.EnvironmentFailed:
		e.failed.Add(1)
		return nil
	}
	e.reads.Add(1)
	if r.Outcome == publisher.EnvironmentHandedOver {
		e.failed.Add(1)
		return nil
	}
	e.invalid.Add(int64(r.Dropped))
	if r.Process != nil {
		e.named.Add(1)
	}
	return &envEntry{id: id, owner: r.Owner, checked: now, exit: r.Exit, proc: r.Process}
}

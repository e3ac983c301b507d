// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/format/otelenv"
	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/proc/environ"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
)

// The environment as a second source of a process's resource: the
// resource an OpenTelemetry SDK takes from OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, read from /proc/PID/environ once per process
// identity (PID and start time), for the PIDs data names. A process that
// publishes a context keeps its published resource; the environment fills
// the keys it lacks. A process with neither variable gets nothing.

// DefaultMaxEnvProcesses bounds the environments kept (one entry per PID,
// whether or not it named a resource, each with a pidfd); past it the
// least recently confirmed one goes.
const DefaultMaxEnvProcesses = 4096

// DefaultEnvLookups is the budget of /proc look-ups one message's PIDs get
// (EnvBudget): a failed look-up of an absent PID costs some 4 µs, so a
// message of 20,000 samples naming 20,000 absent PIDs costs at most ~50 ns
// more per sample (BENCHMARKS.md, "Hostile PIDs").
const DefaultEnvLookups = 256

// maxAbsent bounds the PIDs remembered absent; past it they are forgotten
// at once (a look-up again, within the budget, is the only cost).
const maxAbsent = 4096

// EnvBudget is how many more /proc look-ups (a PID's stat and, for a new
// process, its environment) the environment source may make for one
// message. A nil *EnvBudget is unbounded.
type EnvBudget struct{ left int }

// NewEnvBudget is a budget of n look-ups.
func NewEnvBudget(n int) EnvBudget { return EnvBudget{left: n} }

// take spends one look-up; false when none is left.
func (b *EnvBudget) take() bool {
	if b == nil {
		return true
	}
	if b.left <= 0 {
		return false
	}
	b.left--
	return true
}

// userHZ is the unit of /proc/PID/stat's start time.
const userHZ = 100

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
	// Evicted: entries dropped for the DefaultMaxEnvProcesses bound.
	Evicted int64
}

type envSource struct {
	procRoot string
	self     int // otelctx's own PID (os.Getpid is a system call)
	reader   *environ.Reader
	boot     time.Time
	max      int
	now      func() time.Time

	mu    sync.Mutex
	byPID map[int]*envEntry
	// absent: PIDs no process held when last looked up (Unix ns): data
	// taken by then cannot be of a process that could still be read, so
	// it costs no look-up again.
	absent map[int]int64

	reads, named, timedOut, refused, failed, invalid, evicted atomic.Int64
}

// envEntry is what the environment of one process identity gave.
type envEntry struct {
	// proc: the process as the environment names it (nil: it names
	// nothing); its Context is empty, its Environment the attributes.
	proc  *publisher.Process
	id    publisher.ProcessID
	attrs []otelenv.Attribute
	// checked: when (Unix ns) the PID was last seen held by id.
	checked int64
	// pidfd refers to the process itself (-1: none): while it has not
	// exited it holds the PID, which a poll tells without reading /proc
	// (a stat read costs ~100 µs on a loaded host). gone: its pidfd said
	// it exited.
	pidfd int
	gone  bool
	// retryAt (Unix ns, 0: never): the read failed (timed out, refused):
	// the identity gets nothing until then, and is read again after.
	retryAt int64
	// env is where the environment was when it was read, last seen there
	// at envSeen (Unix ns); execAt: when to look again whether the process
	// exec'd (a new image has new environment strings, same identity).
	env             procstat.EnvArea
	envSeen, execAt int64
	// imageFrom (Unix ns, 0: the process's start): the entry is of an
	// image exec'd after this; data up to it may be the earlier image's.
	imageFrom int64
	// exitedBy (Unix ns, 0: not seen exited): the process had exited by
	// then, the start of the PID's next holder when one was found, else
	// when its exit was seen. Data taken up to it is the process's: as a
	// publisher's context is retained, its resource outlives it for the
	// samples in flight.
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

// alive reports whether ent's process has not exited (false without a
// pidfd); an exited one's pidfd is closed.
func (ent *envEntry) alive() bool {
	if ent.pidfd < 0 {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(ent.pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err == nil && n == 0 {
			return true
		}
		ent.gone = err == nil
		ent.close()
		return false
	}
}

func (ent *envEntry) close() {
	if ent.pidfd >= 0 {
		unix.Close(ent.pidfd)
		ent.pidfd = -1
	}
}

// EnableEnvironment turns the environment source on, reading procRoot
// (normally "/proc"); maxProcesses <= 0 takes DefaultMaxEnvProcesses.
func (c *Catalog) EnableEnvironment(procRoot string, maxProcesses int) error {
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return err
	}
	st, err := fs.Stat()
	if err != nil {
		return err
	}
	if maxProcesses <= 0 {
		maxProcesses = DefaultMaxEnvProcesses
	}
	c.env.Store(&envSource{
		procRoot: procRoot,
		self:     os.Getpid(),
		reader:   environ.New(procRoot, 0, 0, 0),
		boot:     time.Unix(int64(st.BootTime), 0),
		max:      maxProcesses,
		now:      time.Now,
		byPID:    map[int]*envEntry{},
		absent:   map[int]int64{},
	})
	return nil
}

// EnvironmentEnabled reports whether the environment source is on.
func (c *Catalog) EnvironmentEnabled() bool { return c.env.Load() != nil }

// EnvStats returns the environment source's counts (zero when off).
func (c *Catalog) EnvStats() EnvStats {
	e := c.env.Load()
	if e == nil {
		return EnvStats{}
	}
	return EnvStats{
		Reads: e.reads.Load(), Named: e.named.Load(), TimedOut: e.timedOut.Load(), Refused: e.refused.Load(),
		Failed: e.failed.Load(), Invalid: e.invalid.Load(), Evicted: e.evicted.Load(),
	}
}

// Environment returns the attributes p's environment names (nil: none, or
// the source is off): for a process known only by its environment, its
// own; for a publisher, read once for its identity.
func (c *Catalog) Environment(p *publisher.Process) []otelenv.Attribute {
	if p.Environment != nil {
		return p.Environment
	}
	e := c.env.Load()
	if e == nil {
		return nil
	}
	ent, _ := e.current(p.ID.PID, 0, nil)
	if ent == nil || ent.id != p.ID {
		return nil
	}
	return ent.attrs
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
func (e *envSource) current(pid int, t int64, budget *EnvBudget) (ent *envEntry, over bool) {
	e.mu.Lock()
	ent = e.byPID[pid]
	if ent != nil && t != 0 {
		if p := ent.prev; p != nil && t <= p.exitedBy {
			e.mu.Unlock()
			return p, false // taken before the PID changed hands
		}
		if t <= ent.checked || t <= ent.exitedBy {
			e.mu.Unlock()
			return ent, false
		}
	}
	if t != 0 && t <= e.absent[pid] {
		e.mu.Unlock()
		return nil, false // no process then that could be read now
	}
	alive := ent != nil && ent.alive()
	if alive {
		if now := e.now().UnixNano(); now < ent.execAt {
			ent.checked = max(ent.checked, now)
			e.mu.Unlock()
			return ent, false
		}
	}
	if !budget.take() {
		e.mu.Unlock()
		if alive {
			return ent, false // it still holds the PID; the exec check waits for a message with budget left
		}
		return nil, true
	}
	e.mu.Unlock()

	x, err := procstat.ReadExec(e.procRoot, pid)
	now := e.now().UnixNano()
	// An entry whose process exited (its pidfd says so) keeps answering
	// for data taken by exitedBy: the next holder's start, else now.
	var exited *envEntry
	if ent != nil && ent.gone && ent.exitedBy == 0 {
		exited = ent
		e.mu.Lock()
		ent.exitedBy = now
		if err == nil && x.StartTicks > ent.id.StartTicks {
			ent.exitedBy = min(now, startedAt(x.StartTicks, now))
		}
		e.mu.Unlock()
	}
	if err != nil {
		e.mu.Lock()
		if len(e.absent) >= maxAbsent {
			clear(e.absent)
		}
		e.absent[pid] = now
		e.mu.Unlock()
		if exited != nil && t != 0 && t <= exited.exitedBy {
			return exited, false
		}
		return nil, false // gone: what it did after the last check cannot be told from a successor's
	}
	var imageFrom int64
	if ent != nil && ent.id.StartTicks == x.StartTicks {
		e.mu.Lock()
		quarantined := ent.retryAt != 0 && now < ent.retryAt
		moved := ent.env != x.Env
		// At most one environment read per envExecCheck, whatever the area
		// does, and none while a failed read is quarantined: a process that
		// moves its area over slow pages costs one deadline per period.
		if quarantined || (!moved && ent.retryAt == 0) || (moved && now < ent.execAt) {
			ent.checked = max(ent.checked, now)
			if !moved {
				ent.envSeen, ent.execAt = now, now+int64(envExecCheck)
			}
			e.mu.Unlock()
			return ent, false
		}
		imageFrom = ent.imageFrom
		if moved {
			imageFrom = ent.envSeen // it exec'd after the old image was last seen
		}
		e.mu.Unlock()
	}
	if exited != nil && x.StartTicks == exited.id.StartTicks {
		// Exited, not yet reaped (a zombie holds its PID and start time).
		if t != 0 && t <= exited.exitedBy {
			return exited, false
		}
		return nil, false
	}
	next := e.read(pid, x.StartTicks, now)
	if next == nil {
		if exited != nil && t != 0 && t <= exited.exitedBy {
			return exited, false
		}
		return nil, false
	}
	next.env, next.envSeen, next.execAt, next.imageFrom = x.Env, now, now+int64(envExecCheck), imageFrom
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.absent, pid)
	if old := e.byPID[pid]; old == nil && len(e.byPID) >= e.max {
		e.evictOldest()
	} else if old != nil {
		old.close()
		if old.exitedBy != 0 && old.id != next.id {
			old.prev = nil // one previous holder kept, not a chain
			next.prev = old
		}
	}
	e.byPID[pid] = next
	if exited != nil && t != 0 && t <= exited.exitedBy {
		return exited, false
	}
	return next, false
}

// read reads the environment of pid, held by the process started at
// ticks.
func (e *envSource) read(pid int, ticks uint64, now int64) *envEntry {
	var x otelenv.Extractor
	got, err := e.reader.Read(pid, func(b []byte) { _, _ = x.Write(b) })
	switch {
	case errors.Is(err, environ.ErrTimeout):
		e.timedOut.Add(1)
		// x may still be written to: dropped.
		return &envEntry{id: publisher.ProcessID{PID: pid, StartTicks: ticks}, checked: now, pidfd: -1, retryAt: now + int64(envRetry)}
	case errors.Is(err, environ.ErrBusy):
		e.refused.Add(1)
		return &envEntry{id: publisher.ProcessID{PID: pid, StartTicks: ticks}, checked: now, pidfd: -1, retryAt: now + int64(envRetry)}
	case errors.Is(err, environ.ErrTooLarge):
		// The variables past the cap are not seen: what was read stands.
	case err != nil || got != ticks:
		e.failed.Add(1)
		return nil
	}
	e.reads.Add(1)
	// The pidfd is opened after the read and bound to the identity by one
	// more look at the start time (a PID is reused only after its holder
	// exited).
	ent := &envEntry{id: publisher.ProcessID{PID: pid, StartTicks: ticks}, checked: now, pidfd: -1}
	if e.procRoot != "/proc" {
		// A test's tree: its PIDs are not this host's.
	} else if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		ent.pidfd = fd
		if again, err := procstat.StartTicks(e.procRoot, pid); err != nil || again != ticks {
			ent.close()
			e.failed.Add(1)
			return nil
		}
	}
	r := x.Resource()
	e.invalid.Add(int64(r.Stats.Dropped()))
	ent.attrs = r.Attributes
	if len(r.Attributes) > 0 {
		e.named.Add(1)
		ent.proc = &publisher.Process{
			ID:           ent.id,
			CreationTime: e.boot.Add(time.Duration(ticks) * time.Second / userHZ),
			UID:          -1,
			Workload:     hostinfo.WorkloadOf(e.procRoot, pid),
			Environment:  r.Attributes,
		}
	}
	return ent
}

// evictOldest drops the entry confirmed longest ago (e.mu held).
func (e *envSource) evictOldest() {
	var oldest *envEntry
	for _, ent := range e.byPID {
		if oldest == nil || ent.checked < oldest.checked {
			oldest = ent
		}
	}
	if oldest != nil {
		oldest.close()
		delete(e.byPID, oldest.id.PID)
		e.evicted.Add(1)
	}
}

// NamedByEnvironment reports whether the catalog knows p by its
// environment alone (it publishes nothing).
func NamedByEnvironment(p *publisher.Process) bool { return p.Environment != nil }

// EnvFills reports whether p's environment value of key goes onto p's
// resource: p's published resource wins, the environment fills what it
// lacks.
func EnvFills(p *publisher.Process, key string) bool {
	for i := range p.Context.Resource.Attributes {
		if p.Context.Resource.Attributes[i].Key == key {
			return false
		}
	}
	return true
}

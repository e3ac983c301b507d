// Package scan discovers processes that publish an OpenTelemetry process
// context (OTEP 4719), or a Datadog DD_OTEL_CTX thread-context buffer
// (Options.DD), and keeps their contexts current at low cost.
//
// Steady state per scan: one readdir of /proc, one 8-byte process_vm_readv per
// tracked publisher (and a 16-byte one per tracked buffer), one epoll_wait
// for all exits. /proc/PID/maps is parsed only for PIDs not seen before, PIDs
// whose cached address stops validating, and, with exponential backoff, PIDs
// that did not publish yet (or lack one of the two sources).
package scan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/scan/processctx"
	"github.com/otelctx/otelctx/internal/scan/procmaps"
	"github.com/otelctx/otelctx/internal/scan/remote"
	"github.com/otelctx/otelctx/internal/scan/safemem"
)

// ErrProcessLimit: a new publisher was ignored because MaxProcesses are tracked.
var ErrProcessLimit = errors.New("tracked process limit reached")

// errMaps marks a failure to read /proc/PID/maps for another reason than
// permission or the process being gone.
var errMaps = errors.New("maps")

// ErrNoContext: the process has no (valid) process context.
var ErrNoContext = errors.New("no process context mapping")

// maxContextMappings bounds the OTEL_CTX mappings tried in one process.
const maxContextMappings = 4

// userHZ is the kernel's USER_HZ, the unit of /proc/PID/stat times; it is 100
// on every Linux ABI.
const userHZ = 100

// Options configure a Scanner. Zero values take the defaults.
type Options struct {
	// ProcRoot is the procfs mount, default "/proc".
	ProcRoot string
	Limits   processctx.Limits
	// MaxProcesses bounds tracked publishers (default 4096).
	MaxProcesses int
	// Attempts bounds read-protocol rounds on a concurrent update (default 3).
	Attempts int
	// Filter, if set, is asked once per new process whether to look at it.
	Filter func(pid int, executableName string) bool
	// RecheckMin and RecheckMax bound the backoff with which a process that
	// did not publish is looked at again (defaults 1s and 1m).
	RecheckMin, RecheckMax time.Duration
	// MinRescanInterval, when set, is the least time between two looks at
	// one process forced by Rescan: event-driven rescans come from
	// prctl(PR_SET_VMA), which any process can call in a loop.
	MinRescanInterval time.Duration
	// DD selects the processes searched for a DD_OTEL_CTX buffer (default
	// none). A process with a buffer and no process context is tracked too.
	DD     DDMode
	Logger *zap.Logger
	// Now is the clock (tests).
	Now func() time.Time
}

func (o *Options) setDefaults() {
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	def := processctx.DefaultLimits()
	if o.Limits.MaxPayloadSize == 0 {
		o.Limits.MaxPayloadSize = def.MaxPayloadSize
	}
	if o.Limits.MaxAttributes == 0 {
		o.Limits.MaxAttributes = def.MaxAttributes
	}
	if o.Limits.MaxValueLength == 0 {
		o.Limits.MaxValueLength = def.MaxValueLength
	}
	if o.Limits.MaxDepth == 0 {
		o.Limits.MaxDepth = def.MaxDepth
	}
	if o.MaxProcesses == 0 {
		o.MaxProcesses = 4096
	}
	if o.Attempts == 0 {
		o.Attempts = processctx.DefaultAttempts
	}
	if o.RecheckMin == 0 {
		o.RecheckMin = time.Second
	}
	if o.RecheckMax == 0 {
		o.RecheckMax = time.Minute
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Stats describe one scan, for telemetry.
type Stats struct {
	// ProcessesScanned counts processes whose maps were examined.
	ProcessesScanned int
	// Polled counts 8-byte stamp reads of tracked publishers.
	Polled int
	// ContextsTracked is the number of publishers tracked after the scan.
	ContextsTracked int
	// Retries counts read-protocol restarts on concurrent updates.
	Retries int
	// Failures counts failed reads by reason.
	Failures [numReasons]int
	// LimitsExceeded counts contexts decoded with values dropped or truncated.
	LimitsExceeded int
	// DDSearches counts DD_OTEL_CTX buffer searches (Options.DD), DDFound
	// those that found one, DDRefused the candidate headers refused (bad
	// version, slot size or capacity; each once per process and header
	// address, not at every recheck), DDLost the tracked buffers whose
	// header is gone or changed (a check that failed otherwise is counted
	// in Failures, the buffer kept), DDTracked the buffers tracked after
	// the scan.
	DDSearches, DDFound, DDRefused, DDLost, DDTracked int
	Duration                                          time.Duration
}

func (s *Stats) fail(err error) Reason {
	r := ReasonOf(err)
	s.Failures[r]++
	return r
}

type tracked struct {
	proc  *Process
	pidfd int
	dd    ddTrack
}

type candidate struct {
	id        ProcessID
	exe       string // executable path (or comm), for the DD search's Java test
	pidfd     int
	filtered  bool // excluded by the filter or a kernel thread: never read
	nextCheck time.Time
	backoff   time.Duration
	// badStamp is the stamp of a context that failed to decode, so that an
	// unchanged broken publisher costs one stamp read per recheck.
	badAddr, badStamp uint64
	// lastForced is when a Rescan last made its maps be examined: forced
	// looks are rate-limited among themselves, never against the regular
	// ones (a process found just before it publishes must be seen at once).
	lastForced time.Time
}

// Scanner tracks the process contexts of the host. It is not safe for
// concurrent use: one goroutine scans and publishes results.
type Scanner struct {
	opt     Options
	fs      procfs.FS
	boot    time.Time
	exits   *exitWatcher
	tracked map[int]*tracked
	others  map[int]*candidate
	byFD    map[int]int // pidfd -> pid
	forced  map[int]struct{}
	buf     []byte
	present map[int]struct{}
	lister  pidLister
	// ddRefused: the refused DD_OTEL_CTX headers counted, per process.
	ddRefused map[int]*ddRefusals
}

// New returns a Scanner. It fails if procfs is unreadable.
func New(opt Options) (*Scanner, error) {
	opt.setDefaults()
	fs, err := procfs.NewFS(opt.ProcRoot)
	if err != nil {
		return nil, err
	}
	st, err := fs.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s/stat: %w", opt.ProcRoot, err)
	}
	w, err := newExitWatcher()
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	return &Scanner{
		opt:       opt,
		fs:        fs,
		boot:      time.Unix(int64(st.BootTime), 0),
		exits:     w,
		tracked:   map[int]*tracked{},
		others:    map[int]*candidate{},
		byFD:      map[int]int{},
		forced:    map[int]struct{}{},
		present:   map[int]struct{}{},
		lister:    pidLister{root: opt.ProcRoot},
		ddRefused: map[int]*ddRefusals{},
	}, nil
}

// Close releases every pidfd and the epoll instance.
func (s *Scanner) Close() error {
	for pid := range s.tracked {
		s.forgetTracked(pid)
	}
	for pid := range s.others {
		s.forgetOther(pid)
	}
	return s.exits.shutdown()
}

// Rescan makes the next Scan look at pid's maps again, whatever its backoff
// (used by event-driven discovery).
func (s *Scanner) Rescan(pid int) { s.forced[pid] = struct{}{} }

// Processes calls fn for every tracked publisher.
func (s *Scanner) Processes(fn func(*Process)) {
	for _, t := range s.tracked {
		fn(t.proc)
	}
}

// Lookup returns the tracked publisher with this PID.
func (s *Scanner) Lookup(pid int) (*Process, bool) {
	t, ok := s.tracked[pid]
	if !ok {
		return nil, false
	}
	return t.proc, true
}

// pending is a poll result not yet applied: it is only trusted once the
// pidfd check after the read says the process is still the same.
type pending struct {
	pid    int
	stamp  uint64
	err    error
	update *Process
	errOut error
	// ddErr: the tracked buffer's header check failed (ddHeaderLost
	// tells a header gone or changed from a failure of the check).
	ddErr error
}

// Scan runs one discovery and poll round and returns what changed: it lists
// /proc for new PIDs, looks at those due a recheck, and polls the tracked
// publishers.
func (s *Scanner) Scan() ([]Event, Stats, error) { return s.round(true) }

// Poll is a round without discovery: one 8-byte read per tracked publisher,
// one epoll_wait for exits, and a look at the PIDs passed to Rescan. It does
// not list /proc, so its cost does not depend on how many processes the
// host runs; call Scan less often to find new publishers.
func (s *Scanner) Poll() ([]Event, Stats, error) { return s.round(false) }

// PollPIDs looks at the given processes only (a prctl event named them):
// their context is re-read and their events returned. The periodic Poll
// stays the safety net for events the hook missed.
func (s *Scanner) PollPIDs(pids ...int) ([]Event, Stats, error) {
	for _, pid := range pids {
		s.Rescan(pid)
	}
	return s.round(false)
}

func (s *Scanner) round(discover bool) ([]Event, Stats, error) {
	start := s.opt.Now()
	var st Stats
	var events []Event

	var pids []int
	if discover {
		var err error
		if pids, err = s.listPIDs(); err != nil {
			return nil, st, err
		}
	}

	// 1. Poll tracked publishers: one 8-byte read each.
	var results []pending
	for pid, t := range s.tracked {
		if _, ok := s.present[pid]; discover && !ok {
			continue // gone; handled below
		}
		st.Polled++
		p := pending{pid: pid}
		if t.proc.HasContext() {
			p.stamp, p.err = processctx.ReadStamp(remote.Memory{PID: pid}, t.proc.MappingAddr)
			if p.err == nil && p.stamp != t.proc.Context.PublishedAtNs {
				p.update, p.errOut = s.readContext(t.proc, &st)
			}
		}
		if t.proc.DDBuffer != nil {
			p.ddErr = s.revalidateDD(pid, t.proc.DDBuffer)
		}
		results = append(results, p)
	}

	// 2. Exits, after the reads: a result from a process that has exited
	// may have come from a new process with the same PID, and is dropped.
	if err := s.exits.exited(func(fd int) {
		pid := s.byFD[fd]
		if t, ok := s.tracked[pid]; ok && t.pidfd == fd {
			events = append(events, Event{Kind: Lost, Process: t.proc})
			s.forgetTracked(pid)
			return
		}
		if c, ok := s.others[pid]; ok && c.pidfd == fd {
			s.forgetOther(pid)
			return
		}
		// Not ours any more: just close it.
		delete(s.byFD, fd)
		s.exits.close(fd)
	}); err != nil {
		s.opt.Logger.Debug("epoll_wait failed", zap.Error(err))
	}
	if discover {
		// Without a pidfd, a missing /proc entry is how an exit shows.
		for pid, t := range s.tracked {
			if _, ok := s.present[pid]; !ok {
				events = append(events, Event{Kind: Lost, Process: t.proc})
				s.forgetTracked(pid)
			}
		}
	}

	// 3. Apply the surviving poll results.
	for _, p := range results {
		t, ok := s.tracked[p.pid]
		if !ok {
			continue
		}
		if t.pidfd < 0 && !s.same(p.pid, t.proc.ID, -1) {
			// No pidfd (e.g. EMFILE): the start time tells a reused PID.
			events = append(events, Event{Kind: Lost, Process: t.proc})
			s.forgetTracked(p.pid)
			continue
		}
		if p.ddErr != nil && !ddHeaderLost(p.ddErr) {
			// The check failed, not the header (EMFILE, EINTR, ...):
			// counted, the buffer kept, checked again next poll.
			r := st.fail(p.ddErr)
			s.opt.Logger.Debug("DD_OTEL_CTX header check failed", zap.Int("pid", p.pid),
				zap.Stringer("reason", r), zap.Error(p.ddErr))
			p.ddErr = nil
		}
		if p.ddErr != nil {
			// The buffer's header stopped validating (unmapped, or
			// overwritten): drop it, search again later (paced).
			st.DDLost++
			s.opt.Logger.Debug("DD_OTEL_CTX buffer stopped validating", zap.Int("pid", p.pid), zap.Error(p.ddErr))
			if errors.Is(p.ddErr, remote.ErrProcessGone) || !t.proc.HasContext() {
				events = append(events, s.lose(p.pid, t))
				continue
			}
			prev := t.proc
			t.proc = withoutDD(prev)
			events = append(events, Event{Kind: Updated, Process: t.proc, Previous: prev})
			if p.update != nil {
				cp := *p.update
				cp.DDBuffer = nil
				p.update = &cp
			}
		}
		switch {
		case p.err != nil:
			// The cached address stopped validating: the context was
			// unmapped (or the process is going away). Rediscover now.
			s.opt.Logger.Debug("cached process context stopped validating",
				zap.Int("pid", p.pid), zap.Error(p.err))
			events = append(events, s.rediscover(p.pid, t, &st)...)
		case p.errOut != nil:
			r := ReasonOf(p.errOut)
			if r == ReasonConcurrentUpdate || r == ReasonPermission {
				// Transient: keep what we have and retry next scan.
				continue
			}
			if t.proc.DDBuffer != nil {
				// Garbage now, but the buffer still holds: tracked for
				// the buffer alone, the context looked for again later.
				prev := t.proc
				t.proc = withoutContext(prev)
				events = append(events, Event{Kind: Updated, Process: t.proc, Previous: prev})
				continue
			}
			// A publisher that now publishes garbage loses its context.
			events = append(events, Event{Kind: Lost, Process: t.proc})
			c := s.demote(p.pid, t)
			c.badAddr, c.badStamp = t.proc.MappingAddr, p.stamp
		case p.update != nil && sameContent(t.proc, p.update):
			// Only the stamp moved (a publisher rewrote it over the same
			// payload): the new stamp is kept, so the next poll reads 8
			// bytes again, and nothing is announced.
			t.proc = p.update
		case p.update != nil:
			events = append(events, Event{Kind: Updated, Process: p.update, Previous: t.proc})
			t.proc = p.update
		}
	}

	// 4. Discover: new PIDs, forced rescans, and due rechecks. A poll
	// round only looks at the forced ones.
	if !discover {
		for pid := range s.forced {
			pids = append(pids, pid)
		}
	}
	now := s.opt.Now()
	for _, pid := range pids {
		if t, ok := s.tracked[pid]; ok {
			// A tracked process lacking one of the two sources is looked
			// at again, paced, or at once (rate-limited) when forced.
			_, force := s.forced[pid]
			if t.incomplete() && s.ddPaced(t, now, force) {
				events = append(events, s.complete(pid, t, &st)...)
			}
			continue
		}
		c, known := s.others[pid]
		_, force := s.forced[pid]
		if known && !force && now.Before(c.nextCheck) {
			continue
		}
		if known && force && now.Sub(c.lastForced) < s.opt.MinRescanInterval {
			// Anyone can call prctl(PR_SET_VMA) in a loop: a forced look
			// at the same process is taken at most this often (its backoff
			// still looks again later).
			continue
		}
		if known && force {
			c.lastForced = now
		}
		if ev, ok := s.probe(pid, c, &st); ok {
			events = append(events, ev)
		}
	}
	clear(s.forced)
	if discover {
		for pid := range s.others {
			if _, ok := s.present[pid]; !ok {
				s.forgetOther(pid)
			}
		}
	}

	for _, t := range s.tracked {
		if t.proc.HasContext() {
			st.ContextsTracked++
		}
		if t.proc.DDBuffer != nil {
			st.DDTracked++
		}
	}
	st.Duration = s.opt.Now().Sub(start)
	return events, st, nil
}

func (s *Scanner) listPIDs() ([]int, error) {
	pids, err := s.lister.list()
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", s.opt.ProcRoot, err)
	}
	clear(s.present)
	for _, pid := range pids {
		s.present[pid] = struct{}{}
	}
	return pids, nil
}

// readContext runs the full read protocol at the process's cached address
// and decodes the payload into a new Process.
func (s *Scanner) readContext(old *Process, st *Stats) (*Process, error) {
	p := *old
	ctx, ds, err := s.read(old.ID, old.MappingAddr, st)
	if err != nil {
		return nil, err
	}
	p.Context, p.DecodeStats = ctx, ds
	return &p, nil
}

func (s *Scanner) read(id ProcessID, addr uint64, st *Stats) (processctx.Context, processctx.DecodeStats, error) {
	pid := id.PID
	// The payload address is the publisher's choice: read it only where a
	// read cannot block on a file system (package safemem), as the process
	// is mapped now.
	mem := safemem.New(s.opt.ProcRoot, pid)
	raw, rs, err := processctx.ReadRaw(mem, addr, s.opt.Limits.MaxPayloadSize, s.opt.Attempts, s.buf)
	st.Retries += rs.Retries
	if err != nil {
		r := st.fail(err)
		s.opt.Logger.Debug("process context read failed", zap.Int("pid", pid),
			zap.Uint64("addr", addr), zap.Stringer("reason", r), zap.Error(err))
		return processctx.Context{}, processctx.DecodeStats{}, err
	}
	if cap(raw.Payload) > cap(s.buf) {
		s.buf = raw.Payload[:0]
	}
	ctx, ds, err := processctx.Decode(raw.Payload, s.opt.Limits)
	if err != nil {
		st.fail(err)
		s.opt.Logger.Debug("process context payload rejected", zap.Int("pid", pid), zap.Error(err))
		return processctx.Context{}, ds, err
	}
	if ds.Exceeded() {
		st.LimitsExceeded++
		s.opt.Logger.Debug("process context exceeded limits", zap.Int("pid", pid),
			zap.Int("dropped", ds.DroppedAttributes), zap.Int("truncated", ds.TruncatedValues))
	}
	ctx.PublishedAtNs = raw.PublishedAtNs
	return ctx, ds, nil
}

// rediscover re-parses the maps of a tracked publisher whose cached address
// failed: the context may have moved, been dropped, or the process exited.
func (s *Scanner) rediscover(pid int, t *tracked, st *Stats) []Event {
	proc, err := s.find(pid, t.proc.ID, t.pidfd, t.proc, st, nil)
	if err == nil {
		proc.DDBuffer = t.proc.DDBuffer
		if proc.MappingAddr == t.proc.MappingAddr {
			if proc.Context.PublishedAtNs == t.proc.Context.PublishedAtNs {
				return nil
			}
			if sameContent(t.proc, proc) {
				t.proc = proc // only the stamp moved: nothing to announce
				return nil
			}
		}
		old := t.proc
		t.proc = proc
		return []Event{{Kind: Updated, Process: proc, Previous: old}}
	}
	gone := errors.Is(err, remote.ErrProcessGone) || !s.same(pid, t.proc.ID, t.pidfd)
	if !gone && t.proc.DDBuffer != nil {
		// The context went, the buffer stays: tracked for it alone.
		prev := t.proc
		t.proc = withoutContext(prev)
		return []Event{{Kind: Updated, Process: t.proc, Previous: prev}}
	}
	return []Event{s.lose(pid, t)}
}

// lose forgets a tracked process (gone) or demotes it to the candidates,
// and returns its Lost event.
func (s *Scanner) lose(pid int, t *tracked) Event {
	ev := Event{Kind: Lost, Process: t.proc}
	if !s.same(pid, t.proc.ID, t.pidfd) {
		s.forgetTracked(pid)
	} else {
		s.demote(pid, t)
	}
	return ev
}

// probe looks at a process not currently tracked.
func (s *Scanner) probe(pid int, c *candidate, st *Stats) (Event, bool) {
	if c == nil {
		c = s.newCandidate(pid)
		if c == nil {
			return Event{}, false
		}
	}
	if c.filtered {
		return Event{}, false
	}
	if c.badAddr != 0 {
		// Known broken publisher: only look again once its stamp moved.
		if stamp, err := processctx.ReadStamp(remote.Memory{PID: pid}, c.badAddr); err == nil && stamp == c.badStamp {
			s.backoff(c)
			return Event{}, false
		}
		c.badAddr, c.badStamp = 0, 0
	}
	st.ProcessesScanned++
	var jvm bool
	proc, err := s.find(pid, c.id, c.pidfd, nil, st, &jvm)
	wantDD := s.ddWanted(c.exe, jvm)
	if wantDD {
		proc, err = s.withDD(pid, c.id, c.pidfd, proc, err, st)
	}
	if err != nil {
		if errors.Is(err, remote.ErrProcessGone) {
			s.forgetOther(pid)
			return Event{}, false
		}
		if ReasonOf(err) == ReasonPermission {
			// Denied now is denied for this process's life (the same
			// credentials, the same policy): count it once, not per recheck.
			c.filtered = true
		}
		s.backoff(c)
		return Event{}, false
	}
	if len(s.tracked) >= s.opt.MaxProcesses {
		st.fail(ErrProcessLimit)
		s.opt.Logger.Debug("ignoring process context: tracked process limit reached",
			zap.Int("pid", pid), zap.Int("max_processes", s.opt.MaxProcesses))
		s.backoff(c)
		return Event{}, false
	}
	// Promote: the pidfd moves with the entry.
	delete(s.others, pid)
	t := &tracked{proc: proc, pidfd: c.pidfd, dd: ddTrack{wanted: wantDD}}
	s.ddPaced(t, s.opt.Now(), true) // a missing source is looked for again after RecheckMin
	s.tracked[pid] = t
	return Event{Kind: Found, Process: proc}, true
}

// newCandidate starts watching a PID seen for the first time. The pidfd is
// opened before /proc/PID/stat is read, so the start time read belongs to
// the process the pidfd watches (checked with alive afterwards).
func (s *Scanner) newCandidate(pid int) *candidate {
	fd, err := s.exits.open(pid)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	id, exe, kthread, ok := s.identify(pid)
	if !ok || !alive(fd) {
		s.exits.close(fd)
		return nil
	}
	c := &candidate{id: id, exe: exe, pidfd: fd, backoff: s.opt.RecheckMin / 2}
	if fd >= 0 {
		s.byFD[fd] = pid
	}
	s.others[pid] = c
	// Filtered processes and kernel threads are never looked at again
	// while they live.
	c.filtered = kthread || (s.opt.Filter != nil && !s.opt.Filter(pid, filepath.Base(exe)))
	return c
}

func (s *Scanner) backoff(c *candidate) {
	c.backoff = min(max(c.backoff*2, s.opt.RecheckMin), s.opt.RecheckMax)
	c.nextCheck = s.opt.Now().Add(c.backoff)
}

// identify reads a new process's start time and executable.
func (s *Scanner) identify(pid int) (id ProcessID, exe string, kthread, ok bool) {
	p, err := s.fs.Proc(pid)
	if err != nil {
		return id, "", false, false
	}
	stat, err := p.Stat()
	if err != nil {
		return id, "", false, false
	}
	id = ProcessID{PID: pid, StartTicks: stat.Starttime}
	const pfKthread = 0x00200000 // PF_KTHREAD: no user memory to read
	if stat.Flags&pfKthread != 0 {
		return id, stat.Comm, true, true
	}
	if exe, err = p.Executable(); err != nil || exe == "" {
		exe = stat.Comm
	}
	return id, exe, false, true
}

// find locates and reads the process context of pid. prev, when set, is the
// tracked state whose metadata (executable, creation time) carries over.
// jvm, when set, learns whether libjvm.so is mapped (DDJava), from the same
// read of the maps file.
func (s *Scanner) find(pid int, id ProcessID, pidfd int, prev *Process, st *Stats, jvm *bool) (*Process, error) {
	also := ""
	if jvm != nil && s.opt.DD == DDJava {
		also = jvmLibrary
	}
	maps, hasJVM, err := procmaps.FindNamedAlso(s.opt.ProcRoot, pid, "OTEL_CTX", also, isContextMapping)
	if jvm != nil {
		*jvm = hasJVM
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || !s.same(pid, id, pidfd) {
			return nil, fmt.Errorf("%w: %w", remote.ErrProcessGone, err)
		}
		err = fmt.Errorf("%w: %w", errMaps, err)
		st.fail(err)
		s.opt.Logger.Debug("reading maps failed", zap.Int("pid", pid), zap.Error(err))
		return nil, err
	}
	if len(maps) == 0 {
		return nil, ErrNoContext
	}
	// The context is a singleton; a process with many OTEL_CTX mappings is
	// broken or hostile, and each try is a full read of up to 64 KiB.
	if len(maps) > maxContextMappings {
		maps = maps[:maxContextMappings]
	}
	var lastErr error = ErrNoContext
	for _, m := range maps {
		ctx, ds, err := s.read(id, m.Start, st)
		if err != nil {
			lastErr = err
			continue
		}
		// Only now, after the reads, is the identity checked: if the
		// process exited, the bytes may belong to a successor.
		if !s.same(pid, id, pidfd) {
			return nil, fmt.Errorf("pid %d exited during read: %w", pid, remote.ErrProcessGone)
		}
		proc := s.newProcess(pid, id, prev)
		proc.MappingAddr, proc.MappingName, proc.Context, proc.DecodeStats = m.Start, m.Name, ctx, ds
		return proc, nil
	}
	return nil, lastErr
}

// newProcess returns a Process for id with its metadata (creation time,
// executable), carried over from prev when set.
func (s *Scanner) newProcess(pid int, id ProcessID, prev *Process) *Process {
	proc := &Process{ID: id}
	if prev != nil {
		proc.CreationTime, proc.ExecutablePath, proc.ExecutableName = prev.CreationTime, prev.ExecutablePath, prev.ExecutableName
		return proc
	}
	proc.CreationTime = s.boot.Add(time.Duration(id.StartTicks) * time.Second / userHZ)
	if exe, err := s.fs.Proc(pid); err == nil {
		if path, err := exe.Executable(); err == nil {
			proc.ExecutablePath = path
			proc.ExecutableName = filepath.Base(path)
		} else if comm, err := exe.Comm(); err == nil {
			proc.ExecutableName = comm
		}
	}
	return proc
}

// same reports whether pid is still the process id: by its pidfd when there
// is one (exact, one poll syscall), else by re-reading its start time.
func (s *Scanner) same(pid int, id ProcessID, pidfd int) bool {
	if pidfd >= 0 {
		return alive(pidfd)
	}
	p, err := s.fs.Proc(pid)
	if err != nil {
		return false
	}
	stat, err := p.Stat()
	return err == nil && stat.Starttime == id.StartTicks
}

// isContextMapping accepts the four names under which a process context
// appears in /proc/PID/maps (docs/process-context.md).
func isContextMapping(m procmaps.Mapping) bool {
	switch m.Name {
	case "/memfd:OTEL_CTX (deleted)", "/memfd:OTEL_CTX", "[anon_shmem:OTEL_CTX]", "[anon:OTEL_CTX]":
		return m.Size() >= processctx.HeaderSize && strings.HasPrefix(m.Perms, "r")
	}
	return false
}

// demote moves a tracked process back to the candidates, keeping its pidfd.
func (s *Scanner) demote(pid int, t *tracked) *candidate {
	delete(s.tracked, pid)
	exe := t.proc.ExecutablePath
	if exe == "" {
		exe = t.proc.ExecutableName
	}
	c := &candidate{id: t.proc.ID, exe: exe, pidfd: t.pidfd}
	s.others[pid] = c
	s.backoff(c)
	return c
}

func (s *Scanner) forgetTracked(pid int) {
	delete(s.ddRefused, pid)
	if t, ok := s.tracked[pid]; ok {
		delete(s.byFD, t.pidfd)
		s.exits.close(t.pidfd)
		delete(s.tracked, pid)
	}
}

func (s *Scanner) forgetOther(pid int) {
	delete(s.ddRefused, pid)
	if c, ok := s.others[pid]; ok {
		delete(s.byFD, c.pidfd)
		s.exits.close(c.pidfd)
		delete(s.others, pid)
	}
}

// ReadPID reads one process's context now, whatever the scanner tracks (the
// CLI's dump). It returns ErrNoContext, or the reader's error, when the
// process has no valid context.
func (s *Scanner) ReadPID(pid int) (*Process, error) {
	fd, err := s.exits.open(pid)
	if errors.Is(err, syscall.ESRCH) {
		return nil, fmt.Errorf("pid %d: %w", pid, remote.ErrProcessGone)
	}
	if err != nil && !errors.Is(err, syscall.ENOSYS) {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	defer s.exits.close(fd)
	id, _, kthread, ok := s.identify(pid)
	if !ok || !alive(fd) {
		return nil, fmt.Errorf("pid %d: %w", pid, remote.ErrProcessGone)
	}
	if kthread {
		return nil, fmt.Errorf("pid %d is a kernel thread: %w", pid, ErrNoContext)
	}
	var st Stats
	return s.find(pid, id, fd, nil, &st, nil)
}

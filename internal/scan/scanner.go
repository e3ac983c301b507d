// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package scan discovers processes that publish an OpenTelemetry process
// context (OTEP 4719), or a thread-context buffer one of its plug-ins finds
// (Options.Buffers: a BufferSearch per schema found as a process buffer),
// and keeps their contexts current at low cost.
//
// Steady state: a poll round (Poll) is one 8-byte process_vm_readv per
// tracked publisher, after one pread of its pagemap showing the page in
// memory (the address is the publisher's: see safemem), a 16-byte read per
// tracked buffer, and one
// epoll_wait for all their exits; a discovery round (Scan) adds one readdir
// of /proc. /proc/PID/maps is parsed only for PIDs not seen before, PIDs
// whose cached address stops validating, PIDs named by PollPIDs or Rescan,
// and, with exponential backoff, PIDs that did not publish yet (or lack one
// of the two sources).
//
// Kernel objects grow with the tracked publishers only (at most
// Options.MaxProcesses): each has a pidfd in one epoll set and its
// pagemap open. The other
// processes of the host hold no fd: a few dozen bytes each, identified by
// PID and start time, and kernel threads and filtered processes fewer.
package scan

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
)

// ErrProcessLimit: a new publisher was ignored because MaxProcesses are tracked.
var ErrProcessLimit = errors.New("tracked process limit reached")

// ErrUserShare: a new publisher was ignored because its user (its owner:
// package owner) tracks its share of MaxProcesses already (userShare).
var ErrUserShare = errors.New("user's share of tracked processes reached")

// ErrMemoryShare: a new publisher was ignored because the tracked contexts
// cost MaxContextMemory and no user holds more of it than the publisher's
// would with it (share.go).
var ErrMemoryShare = errors.New("tracked contexts' memory bound reached, no user holds more than this one's")

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
	// MaxProcesses bounds tracked publishers (default 4096), shared per
	// user (userShare).
	MaxProcesses int
	// MaxContextMemory bounds what the tracked publishers hold, in bytes
	// (publisher.Process.Cost: the decoded context as the decoder charged
	// it; default DefaultMaxContextMemory), shared per user (share.go).
	MaxContextMemory int
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
	// Buffers are the thread-context buffer searches (default none; at
	// most 8), each over the processes its Scope selects, tried in this
	// order until one finds a buffer: a Process carries one. A process
	// with a buffer and no process context is tracked too.
	Buffers []BufferSearch
	Logger  *zap.Logger
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
	if o.MaxContextMemory == 0 {
		o.MaxContextMemory = DefaultMaxContextMemory
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
	// InvalidUTF8 counts the strings of decoded contexts whose invalid
	// UTF-8 was replaced by U+FFFD.
	InvalidUTF8 int
	// BufferSearches counts thread-context buffer searches
	// (Options.Buffers), BuffersFound those that found one,
	// BufferHeadersRefused the candidate headers refused (bad version, slot
	// size or capacity; each once per process and header address, not at
	// every recheck), BuffersLost the tracked buffers whose header is gone
	// or changed (a check that failed otherwise is counted in Failures, the
	// buffer kept), BuffersTracked the buffers tracked after the scan. They
	// sum over the searches: a caller that wants them per schema runs one.
	BufferSearches, BuffersFound, BufferHeadersRefused, BuffersLost, BuffersTracked int
	// Postponed counts the tracked publishers a round did not poll because
	// its time budget was spent (they are polled by the next one), Overran
	// those it did not poll because an earlier poll of theirs cost more
	// than its share (roundbudget.go; counted in Failures then).
	Postponed, Overran int
	// Evicted counts the tracked publishers let go (a Lost event) to make
	// room for another user's at the MaxProcesses or MaxContextMemory
	// bound; ContextMemory is what the tracked contexts cost after the
	// scan (bytes).
	Evicted, ContextMemory int
	Duration               time.Duration
}

func (s *Stats) fail(err error) Reason {
	r := ReasonOf(err)
	s.Failures[r]++
	return r
}

// Scanner tracks the process contexts of the host. It is not safe for
// concurrent use (but for Interrupt): one goroutine scans and publishes
// results.
type Scanner struct {
	opt   Options
	fs    procfs.FS
	boot  time.Time
	exits *exitWatcher
	// pids is what is known of each PID (pidstate.go).
	pids map[int]*pidState
	// order is the tracked publishers by PID: a poll reads them in that
	// order (see BENCHMARKS.md: cheaper than the map's random order).
	order []*tracked
	// shares: what each user (publisher.Process.Owner; -1: unreadable)
	// holds of MaxProcesses and MaxContextMemory; bytes: their sum.
	shares map[int]*share
	bytes  int
	// nCtx and nBuf count the tracked contexts and buffers (Stats), kept
	// as they change so that a round naming a few PIDs stays O(those).
	nCtx, nBuf int
	// rescans: the PIDs Rescan named since the last Scan or Poll.
	rescans []int
	// deferred holds the tracked publishers a PollPIDs named within
	// MinRescanInterval of their last named poll, until polled.
	deferred []*tracked
	buf      []byte
	pending  []pending
	named    []int
	lister   pidLister
	stat     statReader
	// scope is Options.Buffers' scopes, read once.
	scope bufferScope
	// admitted is the executable admit read at a first look, so that
	// newProcess does not read it again in the same look.
	admitted admittedExe
	// stopping: Interrupt was called; the round under way reads nobody else.
	stopping atomic.Bool
}

type admittedExe struct {
	id   publisher.ProcessID
	path string
}

// New returns a Scanner. It fails if procfs is unreadable, or with more
// than 8 Options.Buffers.
func New(opt Options) (*Scanner, error) {
	opt.setDefaults()
	scope, err := newBufferScope(opt.Buffers)
	if err != nil {
		return nil, err
	}
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
		opt:    opt,
		fs:     fs,
		boot:   time.Unix(int64(st.BootTime), 0),
		exits:  w,
		pids:   map[int]*pidState{},
		shares: map[int]*share{},
		lister: pidLister{root: opt.ProcRoot},
		stat:   statReader{root: opt.ProcRoot},
		scope:  scope,
	}, nil
}

// Interrupt ends the round under way early, from another goroutine: the
// publishers it has not read yet are left to a round that never comes.
// Shutdown calls it so that slow publishers cannot hold the collector's
// exit for a round's whole budget; a scanner interrupted is only closed.
func (s *Scanner) Interrupt() { s.stopping.Store(true) }

// Close releases every pidfd and the epoll instance.
func (s *Scanner) Close() error {
	for len(s.order) > 0 {
		t := s.order[len(s.order)-1]
		s.untrack(t)
		s.forget(t.pid)
	}
	return s.exits.shutdown()
}

// Processes calls fn for every tracked publisher.
func (s *Scanner) Processes(fn func(*publisher.Process)) {
	for _, t := range s.order {
		fn(t.proc)
	}
}

// Lookup returns the tracked publisher with this PID.
func (s *Scanner) Lookup(pid int) (*publisher.Process, bool) {
	ps := s.pids[pid]
	if !ps.is(stateTracked) {
		return nil, false
	}
	return ps.t.proc, true
}

// Scan runs one discovery and poll round and returns what changed: it lists
// /proc for new PIDs, looks at those due a recheck, and polls the tracked
// publishers.
func (s *Scanner) Scan() ([]publisher.Event, Stats, error) { return s.round(true) }

// Poll is a round without discovery: one 8-byte read per tracked publisher,
// one epoll_wait for exits, and a look at the PIDs passed to Rescan. It does
// not list /proc, so its cost does not depend on how many processes the
// host runs; call Scan less often to find new publishers.
func (s *Scanner) Poll() ([]publisher.Event, Stats, error) { return s.round(false) }

// PollPIDs looks at the given processes only (a prctl event named them): a
// tracked one has its stamp read (and its context when it moved) and its
// exit checked, another one its maps examined (at most once per
// MinRescanInterval). No other process is read, and the PIDs passed to
// Rescan wait for the next Scan or Poll, which stays the safety net for
// events the hook missed.
func (s *Scanner) PollPIDs(pids ...int) ([]publisher.Event, Stats, error) {
	r := round{start: s.opt.Now()}
	r.now = r.start
	s.named = append(s.named[:0], pids...)
	slices.Sort(s.named)
	for _, pid := range slices.Compact(s.named) {
		if s.stopping.Load() {
			return s.finish(&r) // Interrupt: nobody else is read
		}
		if ps := s.pids[pid]; ps.is(stateTracked) {
			s.pollPaced(&r, ps.t)
		} else {
			s.lookAt(&r, procEntry{pid: pid}, ps, true)
		}
	}
	s.named = s.deferredDue(r.now, s.named[:0])
	for _, pid := range s.named {
		if s.stopping.Load() {
			break
		}
		if ps := s.pids[pid]; ps.is(stateTracked) {
			s.pollPaced(&r, ps.t)
		}
	}
	return s.finish(&r)
}

// round is one Scan, Poll or PollPIDs: what it found and counted.
type round struct {
	events     []publisher.Event
	st         Stats
	start, now time.Time
}

func (r *round) add(evs ...publisher.Event) { r.events = append(r.events, evs...) }

func (s *Scanner) round(discover bool) ([]publisher.Event, Stats, error) {
	r := round{start: s.opt.Now()}
	var ls listing
	if discover {
		var err error
		if ls, err = s.lister.list(); err != nil {
			return nil, r.st, fmt.Errorf("listing %s: %w", s.opt.ProcRoot, err)
		}
	}
	s.pollTracked(&r, discover, ls)
	s.collectExits(&r)
	if discover {
		s.loseUnlisted(&r, ls)
	}
	s.applyResults(&r)
	r.now = s.opt.Now()
	if discover {
		s.discover(&r, ls)
	} else {
		s.lookForced(&r)
	}
	s.endRescans()
	return s.finish(&r)
}

// discover looks at the listed processes that are new, due a recheck, or
// forced by Rescan, and forgets the untracked ones the listing lacks.
func (s *Scanner) discover(r *round, ls listing) {
	for _, e := range ls {
		if s.stopping.Load() {
			return // Interrupt: nobody else is looked at
		}
		ps := s.pids[e.pid]
		force := ps != nil && ps.rescan
		if ps.is(stateTracked) {
			s.completeDue(r, e.pid, ps.t, force)
			continue
		}
		s.lookAt(r, e, ps, force)
	}
	for pid, ps := range s.pids {
		if (ps.kind == stateCandidate || ps.kind == stateIgnored) && !ls.has(pid) {
			s.forget(pid)
		}
	}
}

// lookForced is a poll round's discovery: the PIDs passed to Rescan only.
func (s *Scanner) lookForced(r *round) {
	for _, pid := range s.rescans {
		if s.stopping.Load() {
			return
		}
		ps := s.pids[pid]
		if ps.is(stateTracked) {
			s.completeDue(r, pid, ps.t, true)
			continue
		}
		s.lookAt(r, procEntry{pid: pid}, ps, true)
	}
}

func (s *Scanner) finish(r *round) ([]publisher.Event, Stats, error) {
	s.shed(r)
	r.st.ContextsTracked, r.st.BuffersTracked, r.st.ContextMemory = s.nCtx, s.nBuf, s.bytes
	r.st.Duration = s.opt.Now().Sub(r.start)
	return r.events, r.st, nil
}

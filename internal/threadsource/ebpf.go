// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/attribution"
	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/threadread"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// rescanQueue bounds the prctl PIDs waiting for the poll goroutine. prctl
// naming calls are rare (one per context publication); when the queue is
// full the next discovery round still finds the process.
const rescanQueue = 1024

// EBPF feeds the eBPF sampler's samples into the catalog and keeps
// the set of processes the kernel reads in line with the catalog.
type EBPF struct {
	progress Progress
	log      *zap.Logger
	s        *sampler.Sampler
	catalog  *catalog.Catalog
	cache    *threadread.Cache
	tel      *telemetry
	limits   processctx.Limits
	// rescan hands prctl PIDs to the poll goroutine, which owns the scanner
	// (rescans).
	rescan chan int
	// changed is signalled (never blocking) when the catalog's processes
	// changed, so that tracking follows at once rather than at the next sync.
	changed   chan struct{}
	syncEvery time.Duration
	self      int

	// pending are the PIDs a round changed, synced alone (O(changes));
	// full asks for a sync of every process. The timer's full sync is the
	// safety net.
	pendMu  sync.Mutex
	pending map[int]struct{}
	full    bool

	mu      sync.RWMutex
	tracked map[int]*trackedProc

	// now is the clock of the thread listings (tests move it).
	now func() time.Time

	// Owned by the sync goroutine.
	logged  map[publisher.ProcessID]bool
	last    sampler.Stats
	statsAt time.Time // when last was read
}

// trackedProc is a process the kernel reads. Its fields are set before it
// is published in tracked and not changed after.
type trackedProc struct {
	proc *publisher.Process
	// v is the thread variable the kernel reads (v.Location nil: none),
	// buf the buffer whose slots it reads (nil: none); at least one is set.
	v   schema.Variable
	buf *publisher.Buffer
	// attr judges the samples. It is shared by the successive trackedProcs
	// of one identity and sources (a context update makes a new
	// trackedProc: what was seen of the threads stays known).
	attr *attribution.Process
}

func newEBPF(log *zap.Logger, s *sampler.Sampler, cat *catalog.Catalog, tel *telemetry,
	limits processctx.Limits, syncEvery time.Duration,
) *EBPF {
	return &EBPF{
		progress: unwatched{}, log: log, s: s, catalog: cat, cache: tel.newCache(), tel: tel, limits: limits,
		rescan: make(chan int, rescanQueue), changed: make(chan struct{}, 1), syncEvery: syncEvery, self: os.Getpid(), now: time.Now,
		tracked: map[int]*trackedProc{}, logged: map[publisher.ProcessID]bool{}, pending: map[int]struct{}{},
	}
}

// Applied asks for a sync of the round's processes (the kernel reads the
// catalog's processes).
func (t *EBPF) Applied(events []publisher.Event) { t.catalogEvents(events) }

// Rescans are the PIDs that named a mapping with prctl (a context being
// published or updated).
func (t *EBPF) Rescans() <-chan int { return t.rescan }

// Current is the followed profiler's method, or own ticks.
func (t *EBPF) Current() string {
	method, ownTicks := t.s.Following()
	switch {
	case method != "":
		return method
	case ownTicks:
		return AtOwnTicks
	}
	return AtNowhere
}

// catalogChanged asks for a sync of every process.
func (t *EBPF) catalogChanged() {
	t.pendMu.Lock()
	t.full = true
	t.pendMu.Unlock()
	t.signal()
}

// catalogEvents asks for a sync of the processes of events; called by the
// poll goroutine after it applied them to the catalog.
func (t *EBPF) catalogEvents(events []publisher.Event) {
	t.pendMu.Lock()
	for _, e := range events {
		t.pending[e.Process.ID.PID] = struct{}{}
	}
	t.pendMu.Unlock()
	t.signal()
}

func (t *EBPF) signal() {
	select {
	case t.changed <- struct{}{}:
	default: // one is pending already
	}
}

// takePending returns the PIDs to sync, or full: sync every process (the
// pending PIDs are then part of it).
func (t *EBPF) takePending(full bool) (pids []int, all bool) {
	t.pendMu.Lock()
	defer t.pendMu.Unlock()
	all = full || t.full
	if !all {
		for pid := range t.pending {
			pids = append(pids, pid)
		}
	}
	clear(t.pending)
	t.full = false
	return pids, all
}

// Start runs the sample reader and the sync loop; both end with ctx (the
// sync loop closes the sampler, which ends Run).
func (t *EBPF) Start(ctx context.Context, wg *sync.WaitGroup) {
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := t.s.Run(t.onSample, t.onPrctl); err != nil && ctx.Err() == nil {
			t.log.Warn("eBPF thread sampler stopped", zap.Error(err))
		}
	}()
	go func() {
		defer wg.Done()
		defer func() {
			if err := t.s.Close(); err != nil {
				t.log.Debug("closing the eBPF sampler", zap.Error(err))
			}
		}()
		tick := time.NewTicker(t.syncEvery)
		defer tick.Stop()
		flush := time.NewTicker(attribution.DefaultListEvery)
		defer flush.Stop()
		full := true
		for {
			pids, all := t.takePending(full)
			full = false
			t.progress.Begin(StageReader)
			if all {
				t.sync(ctx)
			} else {
				t.syncPIDs(ctx, pids)
			}
			t.progress.End(StageReader)
			// Samples of a process with a buffer wait for a thread
			// listing: they are flushed even when no further sample comes.
			var flushC <-chan time.Time
			if t.hasBuffer() {
				flushC = flush.C
			}
		wait:
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					full = true
					break wait
				case <-t.changed:
					break wait
				case <-flushC:
					t.flushSamples()
				}
			}
		}
	}()
}

// hasTLS: the process's context announces a schema whose thread variable
// the readers find (the registry's).
func hasTLS(p *publisher.Process) bool {
	return registry.Announced(p.Context.ThreadLocal)
}

// sync makes the sampler track exactly the catalog's processes with a TLS
// schema and its resolvable variable, or a buffer the sampler reads, each
// for its identity (start time: the kernel does not read a successor that
// reused the PID), and records the kernel's counters.
func (t *EBPF) sync(ctx context.Context) {
	want := map[int]*publisher.Process{}
	for _, p := range t.catalog.Processes() {
		if p.ID.PID != t.self && (hasTLS(p) || sampledBuffer(p) != nil) {
			want[p.ID.PID] = p
		}
	}
	t.mu.RLock()
	cur := make(map[int]*trackedProc, len(t.tracked))
	for pid, tp := range t.tracked {
		cur[pid] = tp
	}
	t.mu.RUnlock()
	for pid, tp := range cur {
		if p, ok := want[pid]; !ok || p.ID != tp.proc.ID {
			t.untrack(pid)
		}
	}
	for pid, p := range want {
		if ctx.Err() != nil {
			return
		}
		tp, ok := cur[pid]
		t.syncOne(ctx, p, tp, ok)
	}
	t.cache.Retain(func(pid int) bool { return want[pid] != nil })
	for id := range t.logged {
		if want[id.PID] == nil {
			delete(t.logged, id)
		}
	}
	t.recordStats(ctx)
}

// syncPIDs is sync for the processes with these PIDs only; it reads the
// kernel counters at most every statsEvery (the full sync always does).
func (t *EBPF) syncPIDs(ctx context.Context, pids []int) {
	for _, pid := range pids {
		if ctx.Err() != nil {
			return
		}
		p, live := t.catalog.Process(pid)
		wanted := live && pid != t.self && (hasTLS(p) || sampledBuffer(p) != nil)
		t.mu.RLock()
		tp, ok := t.tracked[pid]
		t.mu.RUnlock()
		if ok && (!wanted || p.ID != tp.proc.ID) {
			t.untrack(pid)
		}
		if !wanted {
			t.cache.Forget(pid)
			continue
		}
		t.syncOne(ctx, p, tp, ok)
	}
	if time.Since(t.statsAt) >= statsEvery {
		t.recordStats(ctx)
	}
}

// syncOne tracks p, a process to track; tp is its PID's tracked state
// when the sync began (ok: it had one).
func (t *EBPF) syncOne(ctx context.Context, p *publisher.Process, tp *trackedProc, ok bool) {
	pid := p.ID.PID
	buf := sampledBuffer(p)
	var v schema.Variable
	if hasTLS(p) {
		var err error
		v, err = registry.Locate(p.Context.ThreadLocal, func() (*tlsvar.Location, error) { return t.cache.LocationFor(pid, p.Owner) })
		if err != nil {
			t.resolveFailed(ctx, p, err)
			if buf == nil {
				t.untrack(pid)
				return
			}
			v = schema.Variable{} // the buffer is still read
		}
	}
	same := ok && tp.proc.ID == p.ID && sameVariable(tp.v, v) && sameBuffer(tp.buf, buf)
	if same && tp.proc == p {
		return // unchanged (the cache returns the same Location while the mappings are)
	}
	next, err := t.track(ctx, p, tp, same, v, buf)
	if err != nil {
		t.untrack(pid)
		return
	}
	t.mu.Lock()
	t.tracked[pid] = next
	t.mu.Unlock()
	if ok && !same {
		tp.attr.Finish() // the samples it held are still its identity's
	}
}

// track returns the tracked state of p: with the same process and sources
// (same), an updated context: a new key map, the kernel side and the judge
// stay as they are; otherwise a new judge, then the kernel's recipe.
func (t *EBPF) track(ctx context.Context, p *publisher.Process, tp *trackedProc, same bool, v schema.Variable, buf *publisher.Buffer) (*trackedProc, error) {
	if same {
		tp.attr.SetKeyMap(p.Context.ThreadLocal.AttributeKeyMap, t.tel.keyMapRefresher(t.log, p, t.limits))
		return &trackedProc{proc: p, v: v, buf: buf, attr: tp.attr}, nil
	}
	next, err := t.newTracked(p, v, buf)
	if err != nil {
		t.trackFailed(p.ID.PID, err)
		return nil, err
	}
	if err := t.s.TrackTarget(sampler.Target{PID: p.ID.PID, StartTicks: p.ID.StartTicks, Thread: v.Ptr(), Buffer: buf}); err != nil {
		t.tel.fail(ctx, reasonTrack, 1)
		t.log.Debug("eBPF sampler refused a process", zap.Int("pid", p.ID.PID), zap.Error(err))
		return nil, err
	}
	return next, nil
}

// sameVariable reports whether the kernel reads a and b alike: the same
// variable (the cache hands out one Location while the mappings stay),
// schema and walk (a republished context may publish another Node layout).
func sameVariable(a, b schema.Variable) bool {
	if a.Location != b.Location || a.Schema != b.Schema || (a.Walk == nil) != (b.Walk == nil) {
		return false
	}
	return a.Walk == nil || *a.Walk == *b.Walk
}

// isTracked reports whether the kernel reads pid's threads (tests).
func (t *EBPF) isTracked(pid int) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, ok := t.tracked[pid]
	return ok
}

func (t *EBPF) untrack(pid int) {
	t.mu.Lock()
	tp, ok := t.tracked[pid]
	delete(t.tracked, pid)
	t.mu.Unlock()
	if ok {
		if err := t.s.Untrack(pid); err != nil {
			t.log.Debug("eBPF sampler untrack", zap.Int("pid", pid), zap.Error(err))
		}
		tp.attr.Finish() // the samples it held were taken before
	}
}

func (t *EBPF) resolveFailed(ctx context.Context, p *publisher.Process, err error) {
	reason := locateReason(err)
	if t.logged[p.ID] {
		return // counted and logged once per process
	}
	t.logged[p.ID] = true
	t.tel.fail(ctx, reason, 1)
	t.log.Debug("thread context not readable", zap.Int("pid", p.ID.PID), zap.String("reason", reason), zap.Error(err))
}

// bufferOf is the buffer discovery found in p if the registry knows its
// schema and read says it is read (nil: none).
func bufferOf(p *publisher.Process, read func(schema.BufferSchema) bool) *publisher.Buffer {
	if p.Buffer == nil {
		return nil
	}
	s, err := registry.ForBuffer(*p.Buffer)
	if err != nil || !read(s) {
		return nil
	}
	return p.Buffer
}

// sampledBuffer is p's buffer the eBPF sampler reads (nil: none).
func sampledBuffer(p *publisher.Process) *publisher.Buffer {
	return bufferOf(p, sampler.ReadsBuffer)
}

// sameBuffer: a and b are the same buffer (both nil, or same schema, place
// and size).
func sameBuffer(a, b *publisher.Buffer) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Schema == b.Schema && a.Addr == b.Addr && a.Capacity == b.Capacity
}

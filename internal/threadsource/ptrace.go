// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/attribution"
	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/threadread"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// Ptrace snapshots the thread contexts of the catalog's processes. It
// runs on its own goroutine: stopping threads must not delay the polls.
type Ptrace struct {
	progress Progress
	log      *zap.Logger
	cfg      Config
	catalog  *catalog.Catalog
	cache    *threadread.Cache
	tel      *telemetry
	// limits bound the re-read of a process context when a record uses an
	// unknown key index.
	limits processctx.Limits
	now    func() time.Time
	// logged remembers the processes whose resolution failure was logged.
	logged map[publisher.ProcessID]bool
	// dd reads buffers' slots (slotsBuffer).
	dd *slotReader
	// share spreads each round's snapshots over the users.
	share *ptraceShare
}

func newPtrace(log *zap.Logger, cfg Config, cat *catalog.Catalog, tel *telemetry, limits processctx.Limits) *Ptrace {
	return &Ptrace{
		progress: unwatched{}, log: log, cfg: cfg, catalog: cat, cache: tel.newCache(), tel: tel, limits: limits, now: time.Now,
		logged: map[publisher.ProcessID]bool{}, dd: newSlotReader(log, tel), share: newPtraceShare(),
	}
}

// Start starts the goroutine that takes a snapshot of every publisher each
// thread_context.interval; the rounds do not concern it.
func (t *Ptrace) Start(ctx context.Context, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		t.run(ctx)
	}()
}

func (*Ptrace) Applied([]publisher.Event) {}
func (*Ptrace) Rescans() <-chan int       { return nil }
func (*Ptrace) Current() string           { return AtPtrace }

func (t *Ptrace) run(ctx context.Context) {
	tick := time.NewTicker(t.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t.progress.Begin(StageReader)
		t.snapshotAll(ctx)
		t.progress.End(StageReader)
	}
}

// snapshotAll takes one snapshot of every tracked process with a TLS schema
// or a DD_OTEL_CTX buffer, each user's share of them this round (ptraceShare).
func (t *Ptrace) snapshotAll(ctx context.Context) {
	procs := t.catalog.Processes()
	live := make(map[int]bool, len(procs))
	liveIDs := make(map[publisher.ProcessID]bool, len(procs))
	self := os.Getpid()
	read := procs[:0:0]
	for _, p := range procs {
		tls := hasTLS(p)
		if p.ID.PID == self || (!tls && slotsBuffer(p) == nil) {
			continue
		}
		live[p.ID.PID] = true
		liveIDs[p.ID] = true
		read = append(read, p)
	}
	if t.share == nil {
		t.share = newPtraceShare()
	}
	order, deferred := t.share.plan(read)
	if deferred > 0 {
		t.tel.fail(ctx, reasonUserShare, deferred)
	}
	for _, p := range order {
		if ctx.Err() != nil {
			return
		}
		t.snapshot(ctx, p, hasTLS(p))
	}
	t.cache.Retain(func(pid int) bool { return live[pid] })
	for id := range t.logged {
		if !live[id.PID] {
			delete(t.logged, id)
		}
	}
	t.dd.retain(liveIDs)
}

// snapshot reads the thread contexts of one process from its sources
// (tls: its thread variable through ptrace; slotsBuffer: a buffer's slots,
// the DD_OTEL_CTX ring's, read without stopping the threads), merges them
// (a variable's record wins) and writes them to the catalog for the
// process identity.
func (t *Ptrace) snapshot(ctx context.Context, p *publisher.Process, tls bool) {
	pid := p.ID.PID
	var otep []threadread.Thread
	otepFailed := false
	if tls {
		var ok bool
		otep, ok = t.snapshotOTEP(ctx, p)
		otepFailed = !ok
	}
	var slots []threadread.Thread
	if b := slotsBuffer(p); b != nil {
		slots = t.dd.read(ctx, p, *b)
	}
	seen := t.now()
	res, err := attribution.FromSnapshot(attribution.Snapshot{ID: p.ID, At: seen, OTEP: otep, OTEPFailed: otepFailed, Slots: slots})
	switch {
	case errors.Is(err, attribution.ErrPIDReused):
		t.tel.fail(ctx, reasonPIDReused, 1)
		t.log.Debug("thread snapshot dropped", zap.Int("pid", pid), zap.Error(err))
		return
	case err != nil:
		return // nothing read (counted by the source that failed)
	}
	// Under the identity snapshotted: the catalog refuses it if it no
	// longer has that identity.
	dropped, ok := t.catalog.UpdateThreadsFor(p.ID, seen, res.Records, res.Unread)
	if !ok {
		t.log.Debug("thread snapshot dropped: the process changed while it ran", zap.Int("pid", pid))
		return
	}
	if dropped > 0 {
		t.tel.fail(ctx, reasonCatalogLimit, dropped)
	}
}

// snapshotOTEP takes the ptrace snapshot of a process's OTEP 4947 records;
// false when it could not be taken (counted and logged).
func (t *Ptrace) snapshotOTEP(ctx context.Context, p *publisher.Process) ([]threadread.Thread, bool) {
	pid := p.ID.PID
	v, err := registry.Locate(p.Context.ThreadLocal, func() (*tlsvar.Location, error) { return t.cache.LocationFor(pid, p.Owner) })
	if err != nil {
		reason := locateReason(err)
		t.tel.fail(ctx, reason, 1)
		if !t.logged[p.ID] {
			t.logged[p.ID] = true
			t.log.Debug("thread context not readable", zap.Int("pid", pid), zap.String("reason", reason), zap.Error(err))
		}
		return nil, false
	}
	threads, st, err := threadread.Snapshot(pid, v, threadread.Options{
		Done:          ctx.Done(), // Shutdown does not wait for the rest of the threads
		ReadCap:       t.cfg.ReadCap,
		KeyMap:        p.Context.ThreadLocal.AttributeKeyMap,
		RefreshKeyMap: t.tel.keyMapRefresher(t.log, p, t.limits),
	})
	t.tel.tb.ProcessctxThreadSnapshots.Add(ctx, 1)
	if err != nil {
		t.tel.fail(ctx, reasonSnapshot, 1)
		t.log.Debug("thread snapshot failed", zap.Int("pid", pid), zap.Error(err))
		return nil, false
	}
	for _, ts := range st.Ptrace.Threads {
		if ts.Err == nil {
			t.tel.tb.ProcessctxThreadStopDuration.Record(ctx, ts.Stopped.Seconds())
		}
	}
	t.tel.tb.ProcessctxThreadsRead.Add(ctx, int64(st.Records))
	for i := range threads {
		if r := threads[i].Record; r != nil {
			t.tel.invalid(ctx, r.InvalidUTF8)
		}
	}
	t.tel.tb.ProcessctxThreadsAlreadyTraced.Add(ctx, int64(st.Ptrace.AlreadyTraced))
	for reason, n := range st.Reasons {
		if !threadread.NoContext(reason) && reason != threadread.ReasonAlreadyTraced {
			t.tel.fail(ctx, reason, n)
		}
	}
	return threads, true
}

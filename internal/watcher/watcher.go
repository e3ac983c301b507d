// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package watcher owns what the process_ctx components share: the poll
// loop over discovery (internal/scan), the catalog it feeds, and the
// thread source (internal/threadsource) it hands the rounds to. The
// process_ctx extension runs one Watcher; the process_ctx receiver
// subscribes to its rounds (entity events) and the ctx_enrich processor
// reads its catalog.
package watcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/processctxtel"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/envscan"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
	"github.com/otelctx/otelctx/internal/threadsource"
)

// Settings are what a Watcher reports through.
type Settings struct {
	Logger *zap.Logger
	// Telemetry is the process_ctx extension's telemetry builder, whose
	// instruments the watcher and its thread source record (nil: none).
	Telemetry *processctxtel.TelemetryBuilder
}

// Round is one round of the watcher (discovery, poll, or a look at the
// processes a prctl event named), as a subscriber sees it.
type Round struct {
	// Time is when the round's events were applied to the catalog.
	Time time.Time
	// Events are the round's changes, in discovery's order.
	Events []publisher.Event
	// Tracked are the processes tracked after the round. It may only be
	// used during the callback the round was given to: discovery belongs
	// to the poll goroutine.
	Tracked
}

// Tracked is what a round shows of the processes discovery tracks.
type Tracked interface {
	// Processes calls fn for every tracked process.
	Processes(fn func(*publisher.Process))
	// Lookup is the process tracked with pid.
	Lookup(pid int) (*publisher.Process, bool)
}

// Watcher states: Start once, Shutdown any number of times.
const (
	stateNew = iota
	stateRunning
	stateStopped
)

// Watcher discovers and polls publishers, reads their threads' contexts
// and keeps the catalog.
type Watcher struct {
	log     *zap.Logger
	cfg     Config
	tb      *processctxtel.TelemetryBuilder
	tel     *telemetry
	ctel    *catalogTelemetry
	stalls  *stallTelemetry
	catalog *catalog.Catalog
	// progress is when each stage began, for Stuck.
	progress *progress

	mu      sync.Mutex // guards state, cancel and scanner against Start/Shutdown races
	state   int
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	scanner *scan.Scanner
	// closed is closed once Shutdown's goroutines have stopped and the
	// scanner is closed (tests).
	closed chan struct{}

	subsMu  sync.Mutex
	subs    []*subscriber
	roundAt func() time.Time
	// kick asks the poll goroutine for a poll round now (a new
	// subscriber wants to see the tracked processes without waiting).
	kick chan struct{}

	// Owned by the poll goroutine.
	warnedPermission bool
	// threads reads thread contexts (thread_sampler; set by Start).
	threads threadsource.Source
	// rescan is threads' rescans: PIDs to look at now (nil: a nil channel
	// is never ready).
	rescan <-chan int
}

type subscriber struct {
	mu   sync.Mutex // held while fn runs: unsubscribing waits for it
	fn   func(Round)
	gone bool
}

// New makes a Watcher for a valid cfg; nothing runs before Start.
func New(set Settings, cfg Config) (*Watcher, error) {
	if set.Logger == nil {
		set.Logger = zap.NewNop()
	}
	tb := set.Telemetry
	if tb == nil {
		tb = processctxtel.NewNopTelemetryBuilder()
	}
	w := &Watcher{
		log: set.Logger, cfg: cfg, tb: tb, tel: newTelemetry(tb), ctel: newCatalogTelemetry(tb), catalog: catalog.New(),
		stalls: newStallTelemetry(tb), progress: &progress{},
		roundAt: time.Now, kick: make(chan struct{}, 1),
	}
	w.catalog.SetRetention(cfg.ExitedRetention, cfg.Limits.MaxRetainedProcesses)
	w.catalog.SetRetainedMemory(cfg.Limits.retainedMemory())
	w.catalog.SetThreadLimits(cfg.Limits.MaxThreadsPerProcess, cfg.Limits.MaxThreads)
	w.catalog.SetHistoryLimits(cfg.Limits.MaxRunsPerThread, cfg.Limits.MaxRuns)
	// Data newer than a publisher's last round is checked against the
	// PID's holder: exits reach the catalog once per round.
	w.catalog.CheckHolders(envscan.StartTicksOf("/proc"))
	if cfg.EnvironmentResource {
		if src, err := envscan.New("/proc"); err != nil {
			w.log.Warn("environment_resource: off, /proc/stat is unreadable", zap.Error(err))
		} else {
			w.catalog.EnableEnvironment(src, 0)
		}
		w.catalog.SetEnvironmentMemory(cfg.Limits.environmentMemory())
	}
	return w, nil
}

// Catalog is what the watcher knows: live and recently exited publishers
// and their threads' contexts. It exists from New on.
func (w *Watcher) Catalog() *catalog.Catalog { return w.catalog }

// Config is the configuration the watcher was made with.
func (w *Watcher) Config() Config { return w.cfg }

// Subscribe has fn called, on the poll goroutine and in order, with every
// round from now on; the first comes soon after (a poll round is asked
// for). unsubscribe waits for a running call of fn to return; it must not
// be called from fn.
func (w *Watcher) Subscribe(fn func(Round)) (unsubscribe func()) {
	s := &subscriber{fn: fn}
	w.subsMu.Lock()
	w.subs = append(w.subs, s)
	w.subsMu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default: // one is pending already
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			w.subsMu.Lock()
			for i, o := range w.subs {
				if o == s {
					w.subs = append(w.subs[:i:i], w.subs[i+1:]...)
					break
				}
			}
			w.subsMu.Unlock()
			s.mu.Lock()
			s.gone = true
			s.mu.Unlock()
		})
	}
}

// Start opens the scanner, starts the thread-context reader the
// configuration chooses, and the poll goroutine.
func (w *Watcher) Start(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.state {
	case stateRunning:
		return errors.New("process_ctx: already started")
	case stateStopped:
		return errors.New("process_ctx: shut down")
	}
	tlsvar.SetMaxTotalMemory(w.cfg.Limits.resolutionMemory()) // process-wide, as the resolver is: the last started wins
	sc, err := scan.New(scan.Options{
		Limits:           w.cfg.limits(),
		MaxProcesses:     w.cfg.Limits.MaxProcesses,
		MaxContextMemory: w.cfg.Limits.contextMemory(),
		Filter:           w.cfg.filter(),
		RecheckMin:       w.cfg.DiscoveryInterval,
		RecheckMax:       w.cfg.RecheckInterval,
		// Rescans come from the eBPF prctl hook, which any process can
		// trigger in a loop.
		MinRescanInterval: w.cfg.MinRescanInterval,
		Logger:            w.log,
		Buffers:           w.cfg.bufferSearches(),
	})
	if err != nil {
		return fmt.Errorf("process_ctx: cannot read procfs: %w", err)
	}
	// The thread source first: the poll goroutine reads its rescans.
	src, err := threadsource.New(threadsource.Settings{
		Logger: w.log, Telemetry: w.tb, Catalog: w.catalog, Progress: sourceProgress{w.progress},
	}, threadsource.Options{
		Sampler: w.cfg.ThreadSampler, Config: w.cfg.ThreadContext, Limits: w.cfg.limits(),
		MaxProcesses: w.cfg.Limits.MaxProcesses, PrctlWindow: w.cfg.MinRescanInterval, SyncEvery: w.cfg.CollectionInterval,
	})
	if err != nil {
		_ = sc.Close()
		return err
	}
	remote.SetReadTimeout(w.cfg.ReadTimeout) // 0 (a Config not from NewDefaultConfig): the default
	logStalls(w.log)
	ctx, cancel := context.WithCancel(context.Background())
	src.Start(ctx, &w.wg)
	w.threads, w.rescan = src, src.Rescans()
	w.scanner, w.cancel, w.state = sc, cancel, stateRunning
	w.wg.Add(1)
	go w.run(ctx)
	w.log.Info("watching for OpenTelemetry process contexts",
		zap.Duration("collection_interval", w.cfg.CollectionInterval),
		zap.Duration("discovery_interval", w.cfg.DiscoveryInterval))
	return nil
}

// Shutdown stops every goroutine and closes the scanner. It may be called
// without Start and more than once, as the collector requires. It returns
// by ctx's deadline whatever a goroutine is doing: one blocked in a read
// that nothing interrupts closes the scanner when it returns.
func (w *Watcher) Shutdown(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.state
	w.state = stateStopped
	// Its pidfds: the pipelines that look processes up stop before the
	// extensions do.
	defer w.catalog.CloseEnvironment()
	if prev != stateRunning {
		return nil
	}
	w.cancel()
	w.scanner.Interrupt() // a round under way ends at its next publisher
	stopped := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(stopped)
	}()
	sc := w.scanner
	w.closed = make(chan struct{})
	select {
	case <-stopped:
		w.scanner = nil
		defer close(w.closed)
		return sc.Close()
	case <-ctx.Done():
		go func(closed chan struct{}) {
			<-stopped
			_ = sc.Close()
			close(closed)
		}(w.closed)
		return fmt.Errorf("process_ctx: shutdown: %w before the readers stopped (one is blocked in a read)", ctx.Err())
	}
}

// round kinds of the poll goroutine.
const (
	roundPoll = iota
	roundDiscover
	roundPIDs
)

func (w *Watcher) run(ctx context.Context) {
	defer w.wg.Done()
	t := time.NewTicker(w.cfg.CollectionInterval)
	defer t.Stop()
	every := w.cfg.discoverEvery()
	// deferred fires when a poll PollPIDs deferred (a publisher named
	// again within MinRescanInterval) is due.
	deferred := time.NewTimer(time.Hour)
	defer deferred.Stop()
	w.poll(ctx, roundDiscover)
	for round := 1; ; {
		deferredC := w.armDeferred(deferred)
		select {
		case <-ctx.Done():
			return
		case <-deferredC:
			w.poll(ctx, roundPIDs)
		case <-t.C:
			kind := roundPoll
			if round%every == 0 {
				kind = roundDiscover
			}
			w.poll(ctx, kind)
			round++
		case <-w.kick:
			w.poll(ctx, roundPoll)
		case pid := <-w.rescan:
			// A process just published or updated its context (the eBPF
			// prctl hook): look at it, and the others queued, now.
			w.poll(ctx, roundPIDs, w.drainRescan(pid)...)
		}
	}
}

// armDeferred sets t to the scanner's next deferred poll and returns its
// channel, or nil when none is deferred.
func (w *Watcher) armDeferred(t *time.Timer) <-chan time.Time {
	at, ok := w.scanner.NextDeferred()
	if !ok {
		return nil
	}
	t.Reset(time.Until(at))
	return t.C
}

// drainRescan is pid and the PIDs queued behind it.
func (w *Watcher) drainRescan(pid int) []int {
	pids := []int{pid}
	for {
		select {
		case p := <-w.rescan:
			pids = append(pids, p)
		default:
			return pids
		}
	}
}

// poll runs one round, applies its events to the catalog and hands it to
// the subscribers.
func (w *Watcher) poll(ctx context.Context, kind int, pids ...int) {
	if ctx.Err() != nil {
		return // Shutdown: select may pick a ready round over ctx.Done
	}
	w.progress.begin(StagePollRound)
	defer w.progress.end(StagePollRound)
	var events []publisher.Event
	var st scan.Stats
	var err error
	switch kind {
	case roundDiscover:
		events, st, err = w.scanner.Scan()
	case roundPIDs:
		events, st, err = w.scanner.PollPIDs(pids...)
		if w.rescan != nil { // a source that asks for rescans: prctl
			w.tb.ProcessctxPrctlRescans.Add(ctx, int64(len(pids)))
		}
	default:
		events, st, err = w.scanner.Poll()
	}
	w.tel.recordScan(ctx, st)
	w.tel.recordSource(ctx, w.threads.Current())
	w.warnPermission(st)
	if err != nil {
		w.log.Warn("process context scan failed", zap.Error(err))
		return
	}
	w.catalog.Apply(events)
	w.ctel.record(ctx, w.catalog.Occupancy(), w.catalog.EnvStats(), w.cfg.Limits, st.ContextMemory)
	if len(events) > 0 {
		w.threads.Applied(events)
	}
	w.deliver(Round{Time: w.roundAt(), Events: events, Tracked: w.scanner})
}

func (w *Watcher) deliver(r Round) {
	w.subsMu.Lock()
	subs := append([]*subscriber(nil), w.subs...)
	w.subsMu.Unlock()
	for _, s := range subs {
		s.mu.Lock()
		if !s.gone {
			s.fn(r)
		}
		s.mu.Unlock()
	}
}

// warnPermission says once that processes could not be read, and what to
// do about it when the collector lacks the privileges.
func (w *Watcher) warnPermission(st scan.Stats) {
	if st.Failures[scan.ReasonPermission] == 0 || w.warnedPermission {
		return
	}
	w.warnedPermission = true
	denied := zap.Int("denied", st.Failures[scan.ReasonPermission])
	if os.Geteuid() != 0 && !threadsource.HasPtraceCapability() {
		w.log.Warn("some processes cannot be read: run the collector as root or with CAP_SYS_PTRACE, "+
			"in the host PID namespace; see otelcol_processctx_reads_failed{reason=permission}", denied)
		return
	}
	// With the capability this is a sandbox or LSM policy (e.g. PID 1 of
	// a VM sandbox): worth knowing once, not worth a warning.
	w.log.Info("some processes cannot be read even with CAP_SYS_PTRACE (LSM or sandbox policy); "+
		"see otelcol_processctx_reads_failed{reason=permission}", denied)
}

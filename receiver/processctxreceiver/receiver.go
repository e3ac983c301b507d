package processctxreceiver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/sampler"
	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

type processctxReceiver struct {
	set     receiver.Settings
	cfg     *Config
	next    consumer.Logs
	tel     *telemetry
	obsrecv *receiverhelper.ObsReport
	catalog *catalog.Catalog

	scanner *scan.Scanner
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	// lastState is when each tracked process last had its entity_state
	// events emitted; owned by the polling goroutine.
	lastState map[scan.ProcessID]time.Time
	now       func() time.Time
	// warnedPermission makes the hint about privileges a one-time warning.
	warnedPermission bool
	// threads reads thread contexts with ptrace; sampler with eBPF; at
	// most one is set (thread_sampler).
	threads *threadReader
	sampler *samplerReader
	// rescan carries the PIDs of the eBPF prctl hook to the poll goroutine
	// (nil without the sampler: a nil channel is never ready).
	rescan <-chan int
}

func newReceiver(set receiver.Settings, cfg *Config, next consumer.Logs) (*processctxReceiver, error) {
	tel, err := newTelemetry(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	obsrecv, err := receiverhelper.NewObsReport(receiverhelper.ObsReportSettings{
		ReceiverID:             set.ID,
		ReceiverCreateSettings: set,
	})
	if err != nil {
		return nil, err
	}
	r := &processctxReceiver{
		set: set, cfg: cfg, next: next, tel: tel, obsrecv: obsrecv,
		catalog:   catalog.New(),
		lastState: map[scan.ProcessID]time.Time{},
		now:       time.Now,
	}
	r.catalog.SetRetention(cfg.ExitedRetention, cfg.Limits.MaxRetainedProcesses)
	// Registered at creation, not at Start: the collector creates every
	// component before starting any, and starts processors before
	// receivers, so a ctxenrich processor's Start must already find it.
	if err := catalog.Register(set.ID, r.catalog); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *processctxReceiver) Start(_ context.Context, _ component.Host) error {
	if r.cancel != nil {
		return errors.New("processctx: already started")
	}
	sc, err := scan.New(scan.Options{
		Limits:       r.cfg.limits(),
		MaxProcesses: r.cfg.Limits.MaxProcesses,
		Filter:       r.cfg.filter(),
		RecheckMin:   r.cfg.DiscoveryInterval,
		RecheckMax:   r.cfg.RecheckInterval,
		// Rescans come from the eBPF prctl hook, which any process can
		// trigger in a loop: at most 4 forced looks a second per process.
		MinRescanInterval: 250 * time.Millisecond,
		Logger:            r.set.Logger,
		DD:                r.cfg.ddMode(),
	})
	if err != nil {
		return fmt.Errorf("processctx: cannot read procfs: %w", err)
	}
	r.scanner = sc
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	// The thread sampler first: the poll goroutine reads r.rescan.
	if err := r.startThreads(ctx); err != nil {
		cancel()
		r.wg.Wait()
		_ = sc.Close()
		r.cancel = nil
		return err
	}
	r.wg.Add(1)
	go r.run(ctx)
	r.set.Logger.Info("watching for OpenTelemetry process contexts",
		zap.Duration("collection_interval", r.cfg.CollectionInterval),
		zap.Duration("discovery_interval", r.cfg.DiscoveryInterval),
		zap.Duration("entity_interval", r.cfg.EntityInterval))
	return nil
}

// Shutdown may be called without Start and more than once, as the
// collector requires.
func (r *processctxReceiver) Shutdown(context.Context) error {
	catalog.Unregister(r.set.ID, r.catalog)
	if r.cancel == nil {
		return nil // never started, or already shut down
	}
	r.cancel()
	r.wg.Wait()
	r.cancel = nil
	sc := r.scanner
	r.scanner = nil
	return sc.Close()
}

// startThreads chooses the thread sampler (thread_sampler), says which
// and why in one Info line, and starts it.
func (r *processctxReceiver) startThreads(ctx context.Context) error {
	cfg := r.cfg.ThreadContext
	log := r.set.Logger
	choice := r.cfg.ThreadSampler
	if choice == ThreadSamplerOff {
		log.Info("thread contexts: off (thread_sampler: off)")
		return nil
	}
	tel, err := newThreadTelemetry(r.set.TelemetrySettings)
	if err != nil {
		return err
	}
	if choice == ThreadSamplerPtrace {
		if why := hostPrereqs.ptraceProblem(); why != "" {
			log.Warn("thread contexts: ptrace cannot stop threads: "+why+" (thread_sampler: ptrace)",
				zap.Duration("thread_context.interval", cfg.Interval))
		} else {
			log.Info(fmt.Sprintf("thread contexts: ptrace every %v (thread_sampler: ptrace)", cfg.Interval),
				zap.Duration("thread_context.interval", cfg.Interval), zap.Int("thread_context.read_cap", cfg.ReadCap))
		}
		return r.startPtrace(ctx, tel)
	}
	stel, err := newSamplerTelemetry(r.set.TelemetrySettings.MeterProvider.Meter(metadata.ScopeName))
	if err != nil {
		return err
	}
	// The kernel reads at most sampler.MaxReadCap bytes of a record.
	opts := sampler.Options{FrequencyHz: cfg.FrequencyHz, ReadCap: min(cfg.ReadCap, sampler.MaxReadCap), OffCPU: cfg.OffCPU}
	switch choice {
	case ThreadSamplerAuto:
		opts.Follow = sampler.FollowOptions{Programs: cfg.FollowPrograms, OwnTicks: sampler.OwnTicksUnlessFollowing}
	case ThreadSamplerFollow:
		opts.Follow = sampler.FollowOptions{Programs: cfg.FollowPrograms, OwnTicks: sampler.OwnTicksNever}
	}
	if len(opts.Follow.Programs) > 0 {
		opts.Follow.OnChange = followLogger(log, choice, cfg)
	}
	s, err := newSampler(opts)
	if err != nil {
		// The cause and its fix first: the kernel's EPERM alone reads as
		// "MEMLOCK may be too low" whatever is missing.
		if why := hostPrereqs.ebpfProblem(); why != "" {
			err = fmt.Errorf("%s (%w)", why, err)
		}
		if choice == ThreadSamplerAuto {
			log.Warn(fmt.Sprintf("thread contexts: off: the kernel refused the eBPF sampler: %v. Profile samples get no spans; "+
				"thread_sampler: ptrace reads thread contexts by stopping every thread of every publisher in turn (opt-in)", err))
			return nil
		}
		return fmt.Errorf("processctx: thread_sampler: %s: %w", choice, err)
	}
	rescan := make(chan int, rescanQueue)
	r.rescan = rescan
	r.sampler = newSamplerReader(log, s, r.catalog, tel, stel, r.cfg.limits(), rescan, r.cfg.CollectionInterval)
	r.sampler.start(ctx, &r.wg)
	if len(opts.Follow.Programs) == 0 {
		log.Info(fmt.Sprintf("thread contexts: eBPF at own ticks, %d Hz (thread_sampler: %s)", cfg.FrequencyHz, choice),
			zap.Int("thread_context.frequency_hz", cfg.FrequencyHz), zap.Bool("thread_context.off_cpu", cfg.OffCPU),
			zap.Int("thread_context.read_cap", cfg.ReadCap))
	}
	return nil
}

// startPtrace starts the ptrace snapshot reader.
func (r *processctxReceiver) startPtrace(ctx context.Context, tel *threadTelemetry) error {
	cfg := r.cfg.ThreadContext
	log := r.set.Logger
	dd, err := newDDSlotReader(log, r.set.TelemetrySettings.MeterProvider.Meter(metadata.ScopeName), tel)
	if err != nil {
		return err
	}
	r.threads = &threadReader{
		log: log, cfg: cfg, catalog: r.catalog,
		cache: tel.newCache(), tel: tel, limits: r.cfg.limits(), now: r.now,
		logged: map[scan.ProcessID]bool{}, dd: dd,
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.threads.run(ctx)
	}()
	return nil
}

func (r *processctxReceiver) run(ctx context.Context) {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.CollectionInterval)
	defer t.Stop()
	every := r.cfg.discoverEvery()
	r.poll(ctx, true)
	for round := 1; ; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.poll(ctx, round%every == 0)
			round++
		case pid := <-r.rescan:
			// A process just published or updated its context (the eBPF
			// prctl hook): look at it now, not at the next poll.
			r.scanner.Rescan(pid)
			for more := true; more; {
				select {
				case pid := <-r.rescan:
					r.scanner.Rescan(pid)
				default:
					more = false
				}
			}
			r.poll(ctx, false)
		}
	}
}

// poll runs one round (with discovery of new processes, or only a poll of
// the known ones) and emits the resulting entity events.
func (r *processctxReceiver) poll(ctx context.Context, discover bool) {
	round := r.scanner.Poll
	if discover {
		round = r.scanner.Scan
	}
	events, st, err := round()
	r.tel.recordScan(ctx, st)
	if st.Failures[scan.ReasonPermission] > 0 && !r.warnedPermission {
		r.warnedPermission = true
		denied := zap.Int("denied", st.Failures[scan.ReasonPermission])
		if os.Geteuid() != 0 && !hostPrereqs.hasPtrace() {
			r.set.Logger.Warn("some processes cannot be read: run the collector as root or with CAP_SYS_PTRACE, "+
				"in the host PID namespace; see otelcol_processctx_reads_failed{reason=permission}", denied)
		} else {
			// With the capability this is a sandbox or LSM policy (e.g. PID
			// 1 of a VM sandbox): worth knowing once, not worth a warning.
			r.set.Logger.Info("some processes cannot be read even with CAP_SYS_PTRACE (LSM or sandbox policy); "+
				"see otelcol_processctx_reads_failed{reason=permission}", denied)
		}
	}
	if err != nil {
		r.set.Logger.Warn("process context scan failed", zap.Error(err))
		return
	}
	r.catalog.Apply(events)
	if len(events) > 0 && r.sampler != nil {
		r.sampler.catalogChanged()
	}

	now := r.now()
	b := newEventBuilder(r.cfg.EntityInterval, now)
	announced := make(map[int]bool, len(events))
	for _, e := range events {
		switch e.Kind {
		case scan.Found:
			b.found(e.Process)
			r.lastState[e.Process.ID] = now
			announced[e.Process.ID.PID] = true
		case scan.Updated:
			b.updated(e.Previous, e.Process)
			r.lastState[e.Process.ID] = now
			announced[e.Process.ID.PID] = true
		case scan.Lost:
			b.lost(e.Process)
			delete(r.lastState, e.Process.ID)
		}
	}
	// Periodic state events for unchanged processes.
	r.scanner.Processes(func(p *scan.Process) {
		if announced[p.ID.PID] {
			return
		}
		if last, ok := r.lastState[p.ID]; !ok || now.Sub(last) >= r.cfg.EntityInterval {
			b.found(p)
			r.lastState[p.ID] = now
		}
	})
	n := b.logs.LogRecordCount()
	if n == 0 {
		return
	}
	r.tel.recordEvents(ctx, b.counts)
	ctx = r.obsrecv.StartLogsOp(ctx)
	err = r.next.ConsumeLogs(ctx, b.logs)
	r.obsrecv.EndLogsOp(ctx, "", n, err)
	if err != nil && !errors.Is(err, context.Canceled) {
		r.set.Logger.Warn("entity events not accepted downstream", zap.Int("records", n), zap.Error(err))
	}
}

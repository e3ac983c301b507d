package watcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/attribution"
	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/threadread"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// Thread samplers (thread_sampler).
const (
	// ThreadSamplerAuto: eBPF, reading threads at the samples of the
	// profilers named in follow_programs while one runs, at our own ticks
	// otherwise; off when the kernel refuses eBPF (ptrace stops every
	// thread of every publisher, so it is never chosen silently).
	ThreadSamplerAuto = "auto"
	// ThreadSamplerFollow: eBPF at a profiler's samples only; Start fails
	// when the kernel cannot follow one.
	ThreadSamplerFollow = "follow"
	// ThreadSamplerEBPF: the in-kernel sampler at its own ticks only; Start
	// fails when it cannot load.
	ThreadSamplerEBPF = "ebpf"
	// ThreadSamplerPtrace: a ptrace snapshot of every thread every interval.
	ThreadSamplerPtrace = "ptrace"
	// ThreadSamplerOff: thread contexts are not read.
	ThreadSamplerOff = "off"
)

// ThreadContextConfig holds the parameters of the thread samplers (the
// choice of sampler is Config.ThreadSampler).
type ThreadContextConfig struct {
	// Mode is the former place of the sampler choice; it is refused with a
	// pointer to thread_sampler rather than silently ignored.
	Mode string `mapstructure:"mode"`
	// Interval is the ptrace snapshot period.
	Interval time.Duration `mapstructure:"interval"`
	// ReadCap bounds the bytes read of one record, header included (both
	// samplers).
	ReadCap int `mapstructure:"read_cap"`
	// FrequencyHz is the eBPF sampler's sampling frequency per CPU.
	FrequencyHz int `mapstructure:"frequency_hz"`
	// OffCPU makes the eBPF sampler also read the record of a publishing
	// thread when it is switched out.
	OffCPU bool `mapstructure:"off_cpu"`
	// FollowPrograms names the perf_event BPF programs of profilers whose
	// samples are followed (auto and follow).
	FollowPrograms []string `mapstructure:"follow_programs"`
}

// DefaultFollowPrograms is the OTel eBPF profiler's sampling program.
var DefaultFollowPrograms = []string{"native_tracer_entry"}

// Bounds of the thread-context configuration.
const (
	minThreadInterval = 100 * time.Millisecond
	maxReadCap        = threadctx.HeaderSize + 65535 // attrs_data_size is a u16
	maxFrequencyHz    = 10000
	// maxProgramName bounds a BPF function name (KSYM_NAME_LEN is 512).
	maxProgramName = 512
)

func defaultThreadContextConfig() ThreadContextConfig {
	return ThreadContextConfig{Interval: 30 * time.Second, ReadCap: threadctx.DefaultReadCap, FrequencyHz: 97,
		FollowPrograms: slices.Clone(DefaultFollowPrograms)}
}

func validateThreads(choice string, t ThreadContextConfig) []error {
	var errs []error
	switch choice {
	case ThreadSamplerAuto, ThreadSamplerFollow, ThreadSamplerEBPF, ThreadSamplerPtrace, ThreadSamplerOff:
	default:
		errs = append(errs, fmt.Errorf("thread_sampler must be %q, %q, %q, %q or %q, got %q",
			ThreadSamplerAuto, ThreadSamplerFollow, ThreadSamplerEBPF, ThreadSamplerPtrace, ThreadSamplerOff, choice))
	}
	if choice == ThreadSamplerFollow && len(t.FollowPrograms) == 0 {
		errs = append(errs, errors.New("thread_sampler: follow needs thread_context.follow_programs (e.g. [native_tracer_entry])"))
	}
	for i, n := range t.FollowPrograms {
		if n == "" || len(n) > maxProgramName {
			errs = append(errs, fmt.Errorf("thread_context.follow_programs[%d]: %q is not a BPF program name (1-%d bytes)", i, n, maxProgramName))
		}
	}
	if t.Mode != "" {
		errs = append(errs, fmt.Errorf("thread_context.mode is replaced by thread_sampler (auto, follow, ebpf, ptrace or off): "+
			"write thread_sampler: %s and remove thread_context.mode", t.Mode))
	}
	if t.Interval < minThreadInterval {
		errs = append(errs, fmt.Errorf("thread_context.interval must be at least %v, got %v", minThreadInterval, t.Interval))
	}
	if t.ReadCap < threadctx.HeaderSize || t.ReadCap > maxReadCap {
		errs = append(errs, fmt.Errorf("thread_context.read_cap must be in [%d, %d], got %d", threadctx.HeaderSize, maxReadCap, t.ReadCap))
	} else if t.ReadCap > sampler.MaxReadCap && choice != ThreadSamplerPtrace && choice != ThreadSamplerOff {
		errs = append(errs, fmt.Errorf("thread_context.read_cap must be at most %d with thread_sampler: %s (the eBPF sampler reads at most %d bytes of a record; "+
			"only ptrace reads up to %d), got %d", sampler.MaxReadCap, choice, sampler.MaxReadCap, maxReadCap, t.ReadCap))
	}
	if t.FrequencyHz < 1 || t.FrequencyHz > maxFrequencyHz {
		errs = append(errs, fmt.Errorf("thread_context.frequency_hz must be in [1, %d], got %d", maxFrequencyHz, t.FrequencyHz))
	}
	return errs
}

// threadTelemetry records the thread-context metrics of both readers.
type threadTelemetry struct {
	in          *Instruments
	mu          sync.Mutex // guards reasonAttrs
	reasonAttrs map[string]metric.MeasurementOption
	tlsTables   *tlsTableCounter // tlstable.go
	keyMaps     *keyMapTelemetry // keymap.go
	invalidUTF8 invalidUTF8      // utf8.go
	ddRefused   *ddSlotCounter   // ddthreads.go
}

func newThreadTelemetry(in *Instruments) *threadTelemetry {
	return &threadTelemetry{
		in: in, reasonAttrs: map[string]metric.MeasurementOption{},
		tlsTables: newTLSTableCounter(in), keyMaps: newKeyMapTelemetry(in), invalidUTF8: newInvalidUTF8(in),
		ddRefused: newDDSlotCounter(in),
	}
}

func (t *threadTelemetry) fail(ctx context.Context, reason string, n int) {
	// Two goroutines record failures in eBPF mode (samples and the
	// tracking sync): the lazily filled attribute cache needs the lock.
	t.mu.Lock()
	a, ok := t.reasonAttrs[reason]
	if !ok {
		a = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", reason)))
		t.reasonAttrs[reason] = a
	}
	t.mu.Unlock()
	t.in.ProcessctxThreadReadFailures.Add(ctx, int64(n), a)
}

// Process-level reasons of thread_read_failures.
const (
	reasonNoSymbol    = "no symbol"
	reasonUnsupported = "unsupported"
	reasonResolve     = "resolve error"
	reasonSnapshot    = "snapshot error"
	// reasonCatalogLimit: records the catalog dropped (per-process thread
	// limit).
	reasonCatalogLimit = "catalog limit"
)

// threadReader snapshots the thread contexts of the catalog's processes. It
// runs on its own goroutine: stopping threads must not delay the polls.
type threadReader struct {
	log     *zap.Logger
	cfg     ThreadContextConfig
	catalog *catalog.Catalog
	cache   *threadread.Cache
	tel     *threadTelemetry
	// limits bound the re-read of a process context when a record uses an
	// unknown key index.
	limits processctx.Limits
	now    func() time.Time
	// logged remembers the processes whose resolution failure was logged.
	logged map[publisher.ProcessID]bool
	// dd reads the DD_OTEL_CTX slots.
	dd *ddSlotReader
}

func (t *threadReader) run(ctx context.Context) {
	tick := time.NewTicker(t.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t.snapshotAll(ctx)
	}
}

// snapshotAll takes one snapshot of every tracked process with a TLS schema
// or a DD_OTEL_CTX buffer.
func (t *threadReader) snapshotAll(ctx context.Context) {
	procs := t.catalog.Processes()
	live := make(map[int]bool, len(procs))
	liveIDs := make(map[publisher.ProcessID]bool, len(procs))
	self := os.Getpid()
	for _, p := range procs {
		if ctx.Err() != nil {
			return
		}
		tls := threadread.CheckSchema(p.Context.ThreadLocal.SchemaVersion) == nil
		if p.ID.PID == self || (!tls && p.DDBuffer == nil) {
			continue
		}
		live[p.ID.PID] = true
		liveIDs[p.ID] = true
		t.snapshot(ctx, p, tls)
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
// (tls: OTEP 4947 through ptrace; p.DDBuffer: the DD_OTEL_CTX slots, read
// without stopping the threads), merges them (an OTEP 4947 record wins)
// and writes them to the catalog for the process identity.
func (t *threadReader) snapshot(ctx context.Context, p *publisher.Process, tls bool) {
	pid := p.ID.PID
	var otep []threadread.Thread
	otepFailed := false
	if tls {
		var ok bool
		otep, ok = t.snapshotOTEP(ctx, p)
		otepFailed = !ok
	}
	var dd []threadread.Thread
	if p.DDBuffer != nil {
		dd = t.dd.read(ctx, p)
	}
	seen := t.now()
	res, err := attribution.FromSnapshot(attribution.Snapshot{ID: p.ID, At: seen, OTEP: otep, OTEPFailed: otepFailed, DD: dd})
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
func (t *threadReader) snapshotOTEP(ctx context.Context, p *publisher.Process) ([]threadread.Thread, bool) {
	pid := p.ID.PID
	loc, err := t.cache.Location(pid)
	if err != nil {
		reason := reasonResolve
		switch {
		case errors.Is(err, tlsvar.ErrNotFound):
			reason = reasonNoSymbol
		case errors.Is(err, tlsvar.ErrUnsupported):
			reason = reasonUnsupported
		}
		t.tel.fail(ctx, reason, 1)
		if !t.logged[p.ID] {
			t.logged[p.ID] = true
			t.log.Debug("thread context not readable", zap.Int("pid", pid), zap.String("reason", reason), zap.Error(err))
		}
		return nil, false
	}
	node, err := threadread.NodeLayout(p.Context.ThreadLocal, loc)
	if err != nil {
		t.tel.fail(ctx, reasonUnsupported, 1)
		if !t.logged[p.ID] {
			t.logged[p.ID] = true
			t.log.Debug("thread context not readable", zap.Int("pid", pid), zap.String("reason", reasonUnsupported), zap.Error(err))
		}
		return nil, false
	}
	threads, st, err := threadread.Snapshot(pid, loc, threadread.Options{
		Node:          node,
		Done:          ctx.Done(), // Shutdown does not wait for the rest of the threads
		ReadCap:       t.cfg.ReadCap,
		KeyMap:        p.Context.ThreadLocal.AttributeKeyMap,
		RefreshKeyMap: t.tel.keyMaps.refresher(t.log, p, t.limits),
	})
	t.tel.in.ProcessctxThreadSnapshots.Add(ctx, 1)
	if err != nil {
		t.tel.fail(ctx, reasonSnapshot, 1)
		t.log.Debug("thread snapshot failed", zap.Int("pid", pid), zap.Error(err))
		return nil, false
	}
	for _, ts := range st.Ptrace.Threads {
		if ts.Err == nil {
			t.tel.in.ProcessctxThreadStopDuration.Record(ctx, ts.Stopped.Seconds())
		}
	}
	t.tel.in.ProcessctxThreadsRead.Add(ctx, int64(st.Records))
	for i := range threads {
		if r := threads[i].Record; r != nil {
			t.tel.invalidUTF8.add(ctx, utf8ThreadRecord, r.InvalidUTF8)
		}
	}
	t.tel.in.ProcessctxThreadsAlreadyTraced.Add(ctx, int64(st.Ptrace.AlreadyTraced))
	for reason, n := range st.Reasons {
		if !threadread.NoContext(reason) && reason != threadread.ReasonAlreadyTraced {
			t.tel.fail(ctx, reason, n)
		}
	}
	return threads, true
}

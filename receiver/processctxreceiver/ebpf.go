package processctxreceiver

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/processctx"
	"github.com/otelctx/otelctx/internal/scan/remote"
	"github.com/otelctx/otelctx/internal/scan/sampler"
	"github.com/otelctx/otelctx/internal/scan/threadctx"
	"github.com/otelctx/otelctx/internal/scan/threadread"
	"github.com/otelctx/otelctx/internal/scan/tlsvar"
)

// newSampler is sampler.New. It is a variable so that a test can make the
// kernel side unavailable on a machine where it loads, to see auto fall
// back (the failure is injected; everything after it is real).
var newSampler = sampler.New

// Reasons of thread_read_failures specific to the eBPF sampler.
const (
	reasonSampleFault = "sample fault" // the kernel could not read a slot or record
	reasonParse       = "parse error"  // a sampled record was too short
	reasonTrack       = "track error"  // the sampler refused a process
)

// rescanQueue bounds the prctl PIDs waiting for the poll goroutine. prctl
// naming calls are rare (one per context publication); when the queue is
// full the next discovery round still finds the process.
const rescanQueue = 1024

// samplerTelemetry holds the eBPF sampler's own metrics.
type samplerTelemetry struct {
	samples metric.Int64Counter
	dropped metric.Int64Counter
	rescans metric.Int64Counter
}

func newSamplerTelemetry(m metric.Meter) (*samplerTelemetry, error) {
	t := &samplerTelemetry{}
	var errs, err error
	t.samples, err = m.Int64Counter("otelcol_processctx_thread_samples",
		metric.WithDescription("Thread-context samples received from the eBPF sampler (on-CPU ticks and, with off_cpu, switches)."), metric.WithUnit("{sample}"))
	errs = errors.Join(errs, err)
	t.dropped, err = m.Int64Counter("otelcol_processctx_thread_samples_dropped",
		metric.WithDescription("Thread-context samples lost in the kernel because the ring buffer was full."), metric.WithUnit("{sample}"))
	errs = errors.Join(errs, err)
	t.rescans, err = m.Int64Counter("otelcol_processctx_prctl_rescans",
		metric.WithDescription("Processes rescanned at once because they named a mapping with prctl (a context publication)."), metric.WithUnit("{process}"))
	errs = errors.Join(errs, err)
	return t, errs
}

// samplerReader feeds the eBPF sampler's samples into the catalog and keeps
// the set of processes the kernel reads in line with the catalog.
type samplerReader struct {
	log     *zap.Logger
	s       *sampler.Sampler
	catalog *catalog.Catalog
	cache   *threadread.Cache
	tel     *threadTelemetry
	stel    *samplerTelemetry
	limits  processctx.Limits
	// rescan hands prctl PIDs to the poll goroutine, which owns the scanner.
	rescan chan<- int
	// changed is signalled (never blocking) when the catalog's processes
	// changed, so that tracking follows at once rather than at the next sync.
	changed   chan struct{}
	syncEvery time.Duration
	self      int

	mu      sync.RWMutex
	tracked map[int]*trackedProc

	// Owned by the sync goroutine.
	logged map[scan.ProcessID]bool
	last   sampler.Stats
}

// trackedProc is a process the kernel reads. Its fields are set before it
// is published in tracked; keyMap and refreshed are then only touched by
// the sampler's Run goroutine (the only reader of samples).
type trackedProc struct {
	proc      *scan.Process
	loc       *tlsvar.Location
	keyMap    []string
	refreshed bool
}

func newSamplerReader(log *zap.Logger, s *sampler.Sampler, cat *catalog.Catalog, tel *threadTelemetry, stel *samplerTelemetry,
	limits processctx.Limits, rescan chan<- int, syncEvery time.Duration,
) *samplerReader {
	return &samplerReader{
		log: log, s: s, catalog: cat, cache: threadread.NewCache(""), tel: tel, stel: stel, limits: limits,
		rescan: rescan, changed: make(chan struct{}, 1), syncEvery: syncEvery, self: os.Getpid(),
		tracked: map[int]*trackedProc{}, logged: map[scan.ProcessID]bool{},
	}
}

// catalogChanged asks for a sync; called by the poll goroutine after it
// applied events.
func (t *samplerReader) catalogChanged() {
	select {
	case t.changed <- struct{}{}:
	default: // one is pending already
	}
}

// start runs the sample reader and the sync loop; both end with ctx (the
// sync loop closes the sampler, which ends Run).
func (t *samplerReader) start(ctx context.Context, wg *sync.WaitGroup) {
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
		for {
			t.sync(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-t.changed:
			}
		}
	}()
}

// sync makes the sampler track exactly the catalog's processes with a TLS
// schema and a resolvable otel_thread_ctx_v1, and records the kernel's
// counters.
func (t *samplerReader) sync(ctx context.Context) {
	want := map[int]*scan.Process{}
	for _, p := range t.catalog.Processes() {
		if p.ID.PID != t.self && threadread.CheckSchema(p.Context.ThreadLocal.SchemaVersion) == nil {
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
		loc, err := t.cache.Location(pid)
		if err != nil {
			t.resolveFailed(ctx, p, err)
			t.untrack(pid)
			continue
		}
		tp, ok := cur[pid]
		switch {
		case ok && tp.proc.ID == p.ID && tp.loc == loc && tp.proc == p:
			continue // unchanged (the cache returns the same Location while the mappings are)
		case ok && tp.proc.ID == p.ID && tp.loc == loc:
			// Same process and variable, updated context: a new key map;
			// the kernel side stays as it is.
		default:
			if err := t.s.Track(pid, loc); err != nil {
				t.tel.fail(ctx, reasonTrack, 1)
				t.log.Debug("eBPF sampler refused a process", zap.Int("pid", pid), zap.Error(err))
				t.untrack(pid)
				continue
			}
		}
		t.mu.Lock()
		t.tracked[pid] = &trackedProc{proc: p, loc: loc, keyMap: p.Context.ThreadLocal.AttributeKeyMap}
		t.mu.Unlock()
	}
	t.cache.Retain(func(pid int) bool { return want[pid] != nil })
	for id := range t.logged {
		if want[id.PID] == nil {
			delete(t.logged, id)
		}
	}
	t.recordStats(ctx)
}

// isTracked reports whether the kernel reads pid's threads (tests).
func (t *samplerReader) isTracked(pid int) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, ok := t.tracked[pid]
	return ok
}

func (t *samplerReader) untrack(pid int) {
	t.mu.Lock()
	_, ok := t.tracked[pid]
	delete(t.tracked, pid)
	t.mu.Unlock()
	if ok {
		if err := t.s.Untrack(pid); err != nil {
			t.log.Debug("eBPF sampler untrack", zap.Int("pid", pid), zap.Error(err))
		}
	}
}

func (t *samplerReader) resolveFailed(ctx context.Context, p *scan.Process, err error) {
	reason := reasonResolve
	switch {
	case errors.Is(err, tlsvar.ErrNotFound):
		reason = reasonNoSymbol
	case errors.Is(err, tlsvar.ErrUnsupported):
		reason = reasonUnsupported
	}
	if t.logged[p.ID] {
		return // counted and logged once per process
	}
	t.logged[p.ID] = true
	t.tel.fail(ctx, reason, 1)
	t.log.Debug("thread context not readable", zap.Int("pid", p.ID.PID), zap.String("reason", reason), zap.Error(err))
}

// recordStats adds the kernel counters' growth since the last call.
func (t *samplerReader) recordStats(ctx context.Context) {
	st, err := t.s.Stats()
	if err != nil {
		return
	}
	if d := st.Dropped - t.last.Dropped; d > 0 {
		t.stel.dropped.Add(ctx, int64(d))
	}
	if d := st.Failures - t.last.Failures; d > 0 {
		t.tel.fail(ctx, reasonSampleFault, int(d))
	}
	t.last = st
}

// onSample runs on the sampler's Run goroutine, for every sample.
func (t *samplerReader) onSample(smp sampler.Sample) {
	ctx := context.Background()
	t.stel.samples.Add(ctx, 1)
	t.mu.RLock()
	tp := t.tracked[smp.PID]
	t.mu.RUnlock()
	if tp == nil {
		return // untracked since the kernel took it
	}
	var rec *catalog.ThreadRecord
	if smp.Record != nil {
		parsed, err := threadctx.Parse(smp.Record)
		switch {
		case errors.Is(err, threadctx.ErrInvalid):
			// valid != 1: cleared or being written; no context now.
		case err != nil:
			t.tel.fail(ctx, reasonParse, 1)
			return
		default:
			rec = &catalog.ThreadRecord{PID: smp.PID, TID: smp.TID, SeenAt: smp.Time, Record: parsed,
				Attributes: t.name(tp, parsed)}
		}
	}
	// Under the identity the recipe was made for: if the PID changed hands
	// since, the catalog refuses the sample.
	t.catalog.ObserveFor(tp.proc.ID, smp.TID, smp.Time, rec)
}

// name resolves the key indexes; an unknown one makes it re-read the
// process context at its mapping once per context (the map is
// append-only: a newer context may know it; a later update of the context
// brings a new trackedProc and a new chance).
func (t *samplerReader) name(tp *trackedProc, r threadctx.Record) map[string]string {
	named, unknown := r.Named(tp.keyMap)
	if len(unknown) == 0 || tp.refreshed {
		return named
	}
	tp.refreshed = true
	c, _, err := processctx.Read(remote.Memory{PID: tp.proc.ID.PID}, tp.proc.MappingAddr, t.limits)
	if err != nil || len(c.ThreadLocal.AttributeKeyMap) <= len(tp.keyMap) {
		return named
	}
	tp.keyMap = c.ThreadLocal.AttributeKeyMap
	named, _ = r.Named(tp.keyMap)
	return named
}

// onPrctl hands a PID that just named a mapping (a process context being
// published or updated) to the poll goroutine, never blocking the sampler.
func (t *samplerReader) onPrctl(pid int) {
	select {
	case t.rescan <- pid:
		t.stel.rescans.Add(context.Background(), 1)
	default:
	}
}

// ptraceUnavailable says why ptrace snapshots cannot work here ("" if they
// can): no CAP_SYS_PTRACE in the effective set, or Yama forbids attaching.
func ptraceUnavailable() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "cannot read /proc/self/status: " + err.Error()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err == nil && caps&(1<<19) == 0 { // CAP_SYS_PTRACE
				return "no CAP_SYS_PTRACE"
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil && strings.TrimSpace(string(b)) == "3" {
		return "kernel.yama.ptrace_scope is 3"
	}
	return ""
}

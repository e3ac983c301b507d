// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"
	"errors"
	"sync"

	"github.com/otelctx/otelctx/internal/threads/tlsvar"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Process-level reasons of thread_read_failures.
const (
	reasonNoSymbol    = "no symbol"
	reasonUnsupported = "unsupported"
	reasonResolve     = "resolve error"
	// reasonResolveLimit: the process's files or mappings are over the TLS
	// resolver's bounds (tlsvar.ErrLimit: memory, modules, read budget).
	reasonResolveLimit = "resolve limit"
	reasonSnapshot     = "snapshot error"
	// reasonCatalogLimit: records the catalog dropped (per-process thread
	// limit).
	reasonCatalogLimit = "catalog limit"
)

// Reasons of thread_read_failures specific to the eBPF sampler.
const (
	reasonSampleFault = "sample fault" // the kernel could not read a slot or record
	reasonParse       = "parse error"  // a sampled record was too short
	reasonTrack       = "track error"  // the sampler refused a process
	// reasonPIDReused: the kernel saw a tracked PID held by a process with
	// another start time (the tracked one exited, its PID was reused before
	// the next sync untracked it) and read nothing.
	reasonPIDReused = "pid reused"
)

// reasonDDRead: the DD_OTEL_CTX slots of a process could not be read at
// all (thread_read_failures).
const reasonDDRead = "dd read error"

// Reasons of otelcol_processctx_dd_slots_refused (both sources count
// them, under the same name).
const (
	ddSlotBusy      = "busy"      // in_use set at one of the reads
	ddSlotTorn      = "torn"      // the slot changed between the two reads
	ddSlotCollision = "collision" // another live thread maps to the slot
	ddSlotStale     = "stale"     // the slot still holds an exited thread's value
	ddSlotHeader    = "header"    // the buffer's header changed (an exec): eBPF, not read
	ddSlotUnlisted  = "unlisted"  // eBPF: the threads could not be listed after the sample (the process exited)
)

// threadTelemetry records the thread-context metrics both sources share.
type threadTelemetry struct {
	in          *Instruments
	mu          sync.Mutex // guards reasonAttrs
	reasonAttrs map[string]metric.MeasurementOption
	tlsTables   *tlsTableCounter // tlstable.go
	keyMaps     *keyMapTelemetry // keymap.go
	invalidUTF8 invalidUTF8      // utf8.go
	ddRefused   *ddSlotCounter   // below
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

// samplerTelemetry records the eBPF sampler's own metrics.
type samplerTelemetry struct {
	in *Instruments
	// ddRefused is the counter the ptrace path's slot reads share. In the
	// eBPF path busy and torn are the kernel's counts (Stats); collision,
	// stale and unlisted the attribution's (observe).
	ddRefused *ddSlotCounter
}

func newSamplerTelemetry(in *Instruments, tel *threadTelemetry) *samplerTelemetry {
	return &samplerTelemetry{in: in, ddRefused: tel.ddRefused}
}

func (t *samplerTelemetry) refused(ctx context.Context, reason string, n uint64) {
	t.ddRefused.add(ctx, reason, int64(n))
}

// ddSlotCounter counts otelcol_processctx_dd_slots_refused by reason,
// whichever path read the slots.
type ddSlotCounter struct {
	c     metric.Int64Counter
	attrs map[string]metric.MeasurementOption
}

func newDDSlotCounter(in *Instruments) *ddSlotCounter {
	d := &ddSlotCounter{c: in.ProcessctxDdSlotsRefused, attrs: map[string]metric.MeasurementOption{}}
	for _, r := range []string{ddSlotBusy, ddSlotTorn, ddSlotCollision, ddSlotStale, ddSlotHeader, ddSlotUnlisted} {
		d.attrs[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r)))
	}
	return d
}

func (d *ddSlotCounter) add(ctx context.Context, reason string, n int64) {
	if n > 0 {
		d.c.Add(ctx, n, d.attrs[reason])
	}
}

// sourceGauge records 1 for the current thread-context source and 0 for
// the others, every round: a dashboard sees each switch, e.g. the gap
// between a profiler's start and its first followed sample.
type sourceGauge struct {
	g     metric.Int64Gauge
	attrs []metric.RecordOption // by index in threadSources
}

func newSourceGauge(in *Instruments) *sourceGauge {
	s := &sourceGauge{g: in.ProcessctxThreadContextSource}
	for _, src := range threadSources {
		s.attrs = append(s.attrs, metric.WithAttributeSet(attribute.NewSet(attribute.String("source", src))))
	}
	return s
}

func (s *sourceGauge) record(ctx context.Context, current string) {
	for i, src := range threadSources {
		v := int64(0)
		if src == current {
			v = 1
		}
		s.g.Record(ctx, v, s.attrs[i])
	}
}

// resolveReason is the thread_read_failures reason of a failed TLS
// resolution (both sources).
func resolveReason(err error) string {
	switch {
	case errors.Is(err, tlsvar.ErrLimit): // before ErrNotFound, which it may wrap
		return reasonResolveLimit
	case errors.Is(err, tlsvar.ErrNotFound):
		return reasonNoSymbol
	case errors.Is(err, tlsvar.ErrUnsupported):
		return reasonUnsupported
	}
	return reasonResolve
}

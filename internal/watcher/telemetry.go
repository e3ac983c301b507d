// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/otelctx/otelctx/internal/processctxtel"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/threadsource"
)

// utf8ProcessContext is the watcher's source of invalid_utf8 (the thread
// sources count thread_record).
const utf8ProcessContext = "process_context"

// telemetry records the metrics of discovery and polls (the extension's
// metadata.yaml lists them).
type telemetry struct {
	tb          *processctxtel.TelemetryBuilder
	invalidUTF8 *processctxtel.Counter // by source
	ddSearches  *processctxtel.Counter // by result
	readsFailed *processctxtel.Counter // by reason
	// evictedTracked: publishers the scanner let go (catalog_evictions).
	evictedTracked *processctxtel.Counter
	source         *processctxtel.Gauge // thread_context_source, by source

	// recorded: the first round recorded every counter (zeros included);
	// later rounds skip zero counts, since a round per prctl event makes
	// recording a visible share of its cost.
	recorded bool
}

func newTelemetry(tb *processctxtel.TelemetryBuilder) *telemetry {
	var reasons []string
	for _, r := range scan.Reasons() {
		reasons = append(reasons, r.String())
	}
	return &telemetry{
		tb:          tb,
		invalidUTF8: processctxtel.NewCounter(tb.ProcessctxInvalidUtf8, "source", utf8ProcessContext),
		ddSearches:  processctxtel.NewCounter(tb.ProcessctxDdSearches, "result", "found", "not_found"),
		readsFailed: processctxtel.NewCounter(tb.ProcessctxReadsFailed, "reason", reasons...),
		// The catalog's evictions counter, for the kind the scanner takes.
		evictedTracked: processctxtel.NewCounter(tb.ProcessctxCatalogEvictions, "kind", catalogTracked),
		source:         processctxtel.NewGauge(tb.ProcessctxThreadContextSource, "source", threadsource.Places...),
	}
}

func (t *telemetry) recordScan(ctx context.Context, st scan.Stats) {
	all := !t.recorded
	t.recorded = true
	add := func(c metric.Int64Counter, n int) {
		if n != 0 || all {
			c.Add(ctx, int64(n))
		}
	}
	addBy := func(c *processctxtel.Counter, value string, n int) {
		if n != 0 || all {
			c.Add(ctx, value, int64(n))
		}
	}
	add(t.tb.ProcessctxProcessesScanned, st.ProcessesScanned)
	add(t.tb.ProcessctxPolls, st.Polled)
	add(t.tb.ProcessctxConcurrentUpdateRetries, st.Retries)
	add(t.tb.ProcessctxLimitsExceeded, st.LimitsExceeded)
	if st.InvalidUTF8 > 0 {
		t.invalidUTF8.Add(ctx, utf8ProcessContext, int64(st.InvalidUTF8))
	}
	// The scanner's one buffer search is DD_OTEL_CTX's (bufferSearches):
	// its buffer counters are the DD metrics.
	addBy(t.ddSearches, "found", st.BuffersFound)
	addBy(t.ddSearches, "not_found", st.BufferSearches-st.BuffersFound)
	add(t.tb.ProcessctxDdHeadersRefused, st.BufferHeadersRefused)
	add(t.tb.ProcessctxDdBuffersLost, st.BuffersLost)
	addBy(t.evictedTracked, catalogTracked, st.Evicted)
	// Gauges every round: with delta temporality one not recorded in an
	// interval is not exported.
	t.tb.ProcessctxContexts.Record(ctx, int64(st.ContextsTracked))
	t.tb.ProcessctxDdBuffers.Record(ctx, int64(st.BuffersTracked))
	t.tb.ProcessctxScanDuration.Record(ctx, st.Duration.Seconds())
	for r, n := range st.Failures {
		if n > 0 {
			t.readsFailed.Add(ctx, scan.Reason(r).String(), int64(n))
		}
	}
}

// recordSource records 1 for where thread contexts are read now and 0 for
// the other places, every round: a dashboard sees each switch, e.g. the
// gap between a profiler's start and its first followed sample.
func (t *telemetry) recordSource(ctx context.Context, current string) {
	for _, p := range threadsource.Places {
		v := int64(0)
		if p == current {
			v = 1
		}
		t.source.Record(ctx, p, v)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelctx/otelctx/internal/scan"
)

// telemetry records the metrics of discovery and polls (the extension's
// metadata.yaml lists them).
type telemetry struct {
	in          *Instruments
	invalidUTF8 invalidUTF8
	source      *sourceGauge
	// Attribute sets are built once: recording is on every scan.
	ddFound, ddNone metric.MeasurementOption
	reasonAttrs     []metric.MeasurementOption

	// recorded: the first round recorded every counter (zeros included);
	// later rounds skip zero counts, since a round per prctl event makes
	// recording a visible share of its cost.
	recorded bool
}

func newTelemetry(in *Instruments) *telemetry {
	t := &telemetry{in: in, invalidUTF8: newInvalidUTF8(in), source: newSourceGauge(in)}
	t.ddFound = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "found")))
	t.ddNone = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "not_found")))
	for _, r := range scan.Reasons() {
		t.reasonAttrs = append(t.reasonAttrs, metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r.String()))))
	}
	return t
}

func (t *telemetry) recordScan(ctx context.Context, st scan.Stats) {
	all := !t.recorded
	t.recorded = true
	add := func(c metric.Int64Counter, n int, opts ...metric.AddOption) {
		if n != 0 || all {
			c.Add(ctx, int64(n), opts...)
		}
	}
	add(t.in.ProcessctxProcessesScanned, st.ProcessesScanned)
	add(t.in.ProcessctxPolls, st.Polled)
	add(t.in.ProcessctxConcurrentUpdateRetries, st.Retries)
	add(t.in.ProcessctxLimitsExceeded, st.LimitsExceeded)
	t.invalidUTF8.add(ctx, utf8ProcessContext, st.InvalidUTF8)
	add(t.in.ProcessctxDdSearches, st.DDFound, t.ddFound)
	add(t.in.ProcessctxDdSearches, st.DDSearches-st.DDFound, t.ddNone)
	add(t.in.ProcessctxDdHeadersRefused, st.DDRefused)
	add(t.in.ProcessctxDdBuffersLost, st.DDLost)
	// Gauges every round: with delta temporality one not recorded in an
	// interval is not exported.
	t.in.ProcessctxContexts.Record(ctx, int64(st.ContextsTracked))
	t.in.ProcessctxDdBuffers.Record(ctx, int64(st.DDTracked))
	t.in.ProcessctxScanDuration.Record(ctx, st.Duration.Seconds())
	for r, n := range st.Failures {
		if n > 0 {
			t.in.ProcessctxReadsFailed.Add(ctx, int64(n), t.reasonAttrs[r])
		}
	}
}

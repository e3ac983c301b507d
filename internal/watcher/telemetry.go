package watcher

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelctx/otelctx/internal/discovery"
)

// telemetry holds the metrics of discovery and polls (the extension's
// metadata.yaml lists them).
type telemetry struct {
	processesScanned metric.Int64Counter
	polls            metric.Int64Counter
	contexts         metric.Int64Gauge
	readsFailed      metric.Int64Counter
	retries          metric.Int64Counter
	limitsExceeded   metric.Int64Counter
	invalidUTF8      invalidUTF8
	scanDuration     metric.Float64Histogram
	// DD_OTEL_CTX buffer discovery.
	ddSearches      metric.Int64Counter
	ddRefused       metric.Int64Counter
	ddLost          metric.Int64Counter
	ddBuffers       metric.Int64Gauge
	ddFound, ddNone metric.MeasurementOption
	source          *sourceGauge

	// Attribute sets are built once: recording is on every scan.
	reasonAttrs []metric.MeasurementOption

	// recorded: the first round recorded every counter (zeros included);
	// later rounds skip zero counts, since a round per prctl event makes
	// recording a visible share of its cost.
	recorded bool
}

func newTelemetry(m metric.Meter) (*telemetry, error) {
	t := &telemetry{}
	var errs, err error
	t.processesScanned, err = m.Int64Counter("otelcol_processctx_processes_scanned",
		metric.WithDescription("Processes whose /proc/PID/maps was examined for a process context."), metric.WithUnit("{process}"))
	errs = errors.Join(errs, err)
	t.polls, err = m.Int64Counter("otelcol_processctx_polls",
		metric.WithDescription("Steady-state polls of tracked processes (one 8-byte read each)."), metric.WithUnit("{poll}"))
	errs = errors.Join(errs, err)
	t.contexts, err = m.Int64Gauge("otelcol_processctx_contexts",
		metric.WithDescription("Process contexts currently tracked."), metric.WithUnit("{process}"))
	errs = errors.Join(errs, err)
	t.readsFailed, err = m.Int64Counter("otelcol_processctx_reads_failed",
		metric.WithDescription("Failed process-context reads, by reason."), metric.WithUnit("{read}"))
	errs = errors.Join(errs, err)
	t.retries, err = m.Int64Counter("otelcol_processctx_concurrent_update_retries",
		metric.WithDescription("Read-protocol restarts because the publisher was updating."), metric.WithUnit("{retry}"))
	errs = errors.Join(errs, err)
	t.limitsExceeded, err = m.Int64Counter("otelcol_processctx_limits_exceeded",
		metric.WithDescription("Contexts decoded with attributes dropped or values truncated by the limits."), metric.WithUnit("{context}"))
	errs = errors.Join(errs, err)
	t.invalidUTF8, err = newInvalidUTF8(m)
	errs = errors.Join(errs, err)
	t.scanDuration, err = m.Float64Histogram("otelcol_processctx_scan_duration",
		metric.WithDescription("Duration of one round (discovery or poll)."), metric.WithUnit("s"))
	errs = errors.Join(errs, err)
	t.ddSearches, err = m.Int64Counter("otelcol_processctx_dd_searches",
		metric.WithDescription("Searches of a process for a DD_OTEL_CTX buffer (dd_otel_ctx.processes), by result (found, not_found)."), metric.WithUnit("{search}"))
	errs = errors.Join(errs, err)
	t.ddRefused, err = m.Int64Counter("otelcol_processctx_dd_headers_refused",
		metric.WithDescription("DD_OTEL_CTX buffer headers refused (the magic or name, with a bad version, slot size or capacity)."), metric.WithUnit("{header}"))
	errs = errors.Join(errs, err)
	t.ddLost, err = m.Int64Counter("otelcol_processctx_dd_buffers_lost",
		metric.WithDescription("Tracked DD_OTEL_CTX buffers whose header stopped validating."), metric.WithUnit("{buffer}"))
	errs = errors.Join(errs, err)
	t.ddBuffers, err = m.Int64Gauge("otelcol_processctx_dd_buffers",
		metric.WithDescription("DD_OTEL_CTX buffers currently tracked."), metric.WithUnit("{buffer}"))
	errs = errors.Join(errs, err)
	t.source, err = newSourceGauge(m)
	errs = errors.Join(errs, err)
	t.ddFound = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "found")))
	t.ddNone = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "not_found")))
	for _, r := range discovery.Reasons() {
		t.reasonAttrs = append(t.reasonAttrs, metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r.String()))))
	}
	return t, errs
}

func (t *telemetry) recordScan(ctx context.Context, st discovery.Stats) {
	all := !t.recorded
	t.recorded = true
	add := func(c metric.Int64Counter, n int, opts ...metric.AddOption) {
		if n != 0 || all {
			c.Add(ctx, int64(n), opts...)
		}
	}
	add(t.processesScanned, st.ProcessesScanned)
	add(t.polls, st.Polled)
	add(t.retries, st.Retries)
	add(t.limitsExceeded, st.LimitsExceeded)
	t.invalidUTF8.add(ctx, utf8ProcessContext, st.InvalidUTF8)
	add(t.ddSearches, st.DDFound, t.ddFound)
	add(t.ddSearches, st.DDSearches-st.DDFound, t.ddNone)
	add(t.ddRefused, st.DDRefused)
	add(t.ddLost, st.DDLost)
	// Gauges every round: with delta temporality one not recorded in an
	// interval is not exported.
	t.contexts.Record(ctx, int64(st.ContextsTracked))
	t.ddBuffers.Record(ctx, int64(st.DDTracked))
	t.scanDuration.Record(ctx, st.Duration.Seconds())
	for r, n := range st.Failures {
		if n > 0 {
			t.readsFailed.Add(ctx, int64(n), t.reasonAttrs[r])
		}
	}
}

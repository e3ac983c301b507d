package watcher

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelctx/otelctx/internal/catalog"
)

// What the catalog holds, by kind (the kind attribute).
const (
	catalogProcesses = "processes"
	catalogRetained  = "retained_processes"
	catalogThreads   = "threads"
	catalogRuns      = "runs"
)

// catalogTelemetry: the catalog's occupancy against its bounds, and what
// the bounds took, recorded by the poll goroutine every round.
type catalogTelemetry struct {
	used, limit        metric.Int64Gauge
	evictions, refused metric.Int64Counter
	kinds              map[string]metric.MeasurementOption
	last               catalog.Occupancy
	recorded           bool
}

func newCatalogTelemetry(m metric.Meter) (*catalogTelemetry, error) {
	t := &catalogTelemetry{kinds: map[string]metric.MeasurementOption{}}
	var errs, err error
	t.used, err = m.Int64Gauge("otelcol_processctx_catalog_used",
		metric.WithDescription("What the catalog holds, by kind: live processes, exited processes retained, threads with a history, runs of those histories."),
		metric.WithUnit("{item}"))
	errs = errors.Join(errs, err)
	t.limit, err = m.Int64Gauge("otelcol_processctx_catalog_limit",
		metric.WithDescription("The catalog's bound of each kind (limits.max_processes, max_retained_processes, max_threads, max_runs)."),
		metric.WithUnit("{item}"))
	errs = errors.Join(errs, err)
	t.evictions, err = m.Int64Counter("otelcol_processctx_catalog_evictions",
		metric.WithDescription("What the catalog's bounds took to make room, by kind: threads (with their runs), runs, exited processes retained."),
		metric.WithUnit("{item}"))
	errs = errors.Join(errs, err)
	t.refused, err = m.Int64Counter("otelcol_processctx_catalog_threads_refused",
		metric.WithDescription("New threads the catalog made no room for (every thread of the process was observed as recently)."),
		metric.WithUnit("{thread}"))
	errs = errors.Join(errs, err)
	for _, k := range []string{catalogProcesses, catalogRetained, catalogThreads, catalogRuns} {
		t.kinds[k] = metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", k)))
	}
	return t, errs
}

func (t *catalogTelemetry) record(ctx context.Context, o catalog.Occupancy, maxProcesses int) {
	for _, g := range []struct {
		kind        string
		used, limit int
	}{
		{catalogProcesses, o.Processes, maxProcesses},
		{catalogRetained, o.Retained, o.MaxRetained},
		{catalogThreads, o.Threads, o.MaxThreads},
		{catalogRuns, o.Runs, o.MaxRuns},
	} {
		// Every round: with delta temporality a gauge not recorded in an
		// interval is not exported.
		t.used.Record(ctx, int64(g.used), t.kinds[g.kind])
		t.limit.Record(ctx, int64(g.limit), t.kinds[g.kind])
	}
	all := !t.recorded
	t.recorded = true
	add := func(c metric.Int64Counter, n int64, opts ...metric.AddOption) {
		if n != 0 || all {
			c.Add(ctx, n, opts...)
		}
	}
	add(t.evictions, o.EvictedThreads-t.last.EvictedThreads, t.kinds[catalogThreads])
	add(t.evictions, o.EvictedRuns-t.last.EvictedRuns, t.kinds[catalogRuns])
	add(t.evictions, o.EvictedRetained-t.last.EvictedRetained, t.kinds[catalogRetained])
	add(t.refused, o.RefusedThreads-t.last.RefusedThreads)
	t.last = o
}

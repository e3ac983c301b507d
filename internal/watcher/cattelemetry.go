// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"

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
	in       *Instruments
	kinds    map[string]metric.MeasurementOption
	last     catalog.Occupancy
	lastEnv  catalog.EnvStats
	outcomes map[string]metric.AddOption
	recorded bool
}

func newCatalogTelemetry(in *Instruments) *catalogTelemetry {
	t := &catalogTelemetry{in: in, kinds: map[string]metric.MeasurementOption{}}
	for _, k := range []string{catalogProcesses, catalogRetained, catalogThreads, catalogRuns} {
		t.kinds[k] = metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", k)))
	}
	t.outcomes = map[string]metric.AddOption{}
	for _, o := range []string{"named", "unnamed", "timeout", "refused", "failed"} {
		t.outcomes[o] = metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", o)))
	}
	return t
}

func (t *catalogTelemetry) record(ctx context.Context, o catalog.Occupancy, env catalog.EnvStats, maxProcesses int) {
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
		t.in.ProcessctxCatalogUsed.Record(ctx, int64(g.used), t.kinds[g.kind])
		t.in.ProcessctxCatalogLimit.Record(ctx, int64(g.limit), t.kinds[g.kind])
	}
	all := !t.recorded
	t.recorded = true
	add := func(c metric.Int64Counter, n int64, opts ...metric.AddOption) {
		if n != 0 || all {
			c.Add(ctx, n, opts...)
		}
	}
	add(t.in.ProcessctxCatalogEvictions, o.EvictedThreads-t.last.EvictedThreads, t.kinds[catalogThreads])
	add(t.in.ProcessctxCatalogEvictions, o.EvictedRuns-t.last.EvictedRuns, t.kinds[catalogRuns])
	add(t.in.ProcessctxCatalogEvictions, o.EvictedRetained-t.last.EvictedRetained, t.kinds[catalogRetained])
	add(t.in.ProcessctxCatalogThreadsRefused, o.RefusedThreads-t.last.RefusedThreads)
	t.last = o
	l := t.lastEnv
	add(t.in.ProcessctxEnvironmentReads, env.Named-l.Named, t.outcomes["named"])
	add(t.in.ProcessctxEnvironmentReads, (env.Reads-env.Named)-(l.Reads-l.Named), t.outcomes["unnamed"])
	add(t.in.ProcessctxEnvironmentReads, env.TimedOut-l.TimedOut, t.outcomes["timeout"])
	add(t.in.ProcessctxEnvironmentReads, env.Refused-l.Refused, t.outcomes["refused"])
	add(t.in.ProcessctxEnvironmentReads, env.Failed-l.Failed, t.outcomes["failed"])
	add(t.in.ProcessctxEnvironmentInvalid, env.Invalid-l.Invalid)
	t.lastEnv = env
}

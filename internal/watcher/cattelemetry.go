// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/processctxtel"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// What the catalog holds, by kind (the kind attribute).
const (
	catalogProcesses = "processes"
	catalogRetained  = "retained_processes"
	catalogThreads   = "threads"
	catalogRuns      = "runs"
	// catalogTracked: publishers the scanner let go for another user's
	// (an eviction kind only).
	catalogTracked = "tracked_processes"
)

// catalogTelemetry: the catalog's occupancy against its bounds, and what
// the bounds took, recorded by the poll goroutine every round.
type catalogTelemetry struct {
	tb        *processctxtel.TelemetryBuilder
	used      *processctxtel.Gauge   // by kind
	limit     *processctxtel.Gauge   // by kind
	evictions *processctxtel.Counter // by kind
	envReads  *processctxtel.Counter // by outcome
	memory    *processctxtel.Gauge   // by part of limits.max_process_memory
	memLimit  *processctxtel.Gauge   // by part
	last      catalog.Occupancy
	lastEnv   catalog.EnvStats
	recorded  bool
}

func newCatalogTelemetry(tb *processctxtel.TelemetryBuilder) *catalogTelemetry {
	kinds := []string{catalogProcesses, catalogRetained, catalogThreads, catalogRuns}
	return &catalogTelemetry{
		tb:        tb,
		used:      processctxtel.NewGauge(tb.ProcessctxCatalogUsed, "kind", kinds...),
		limit:     processctxtel.NewGauge(tb.ProcessctxCatalogLimit, "kind", kinds...),
		evictions: processctxtel.NewCounter(tb.ProcessctxCatalogEvictions, "kind", kinds...),
		envReads:  processctxtel.NewCounter(tb.ProcessctxEnvironmentReads, "outcome", "named", "unnamed", "timeout", "refused", "failed"),
		memory:    processctxtel.NewGauge(tb.ProcessctxProcessMemory, "part", memoryParts...),
		memLimit:  processctxtel.NewGauge(tb.ProcessctxProcessMemoryLimit, "part", memoryParts...),
	}
}

// The parts of limits.max_process_memory (the part attribute).
var memoryParts = []string{"contexts", catalogRetained, "environment", "resolutions"}

// record records the catalog's occupancy, its environment cache's stats
// and, with the tracked contexts' memory (scan.Stats.ContextMemory), what
// is held of limits.
func (t *catalogTelemetry) record(ctx context.Context, o catalog.Occupancy, env catalog.EnvStats, limits LimitsConfig, contextMemory int) {
	maxProcesses := limits.MaxProcesses
	resolving, resolveLimit := tlsvar.TotalMemory()
	for _, m := range []struct {
		part        string
		used, limit int64
	}{
		{"contexts", int64(contextMemory), int64(limits.contextMemory())},
		{catalogRetained, int64(o.RetainedMemory), int64(o.MaxRetainedMemory)},
		{"environment", env.Memory, env.MaxMemory}, // 0, 0 with environment_resource off
		{"resolutions", resolving, resolveLimit},
	} {
		t.memory.Record(ctx, m.part, m.used)
		t.memLimit.Record(ctx, m.part, m.limit)
	}
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
		t.used.Record(ctx, g.kind, int64(g.used))
		t.limit.Record(ctx, g.kind, int64(g.limit))
	}
	all := !t.recorded
	t.recorded = true
	addBy := func(c *processctxtel.Counter, value string, n int64) {
		if n != 0 || all {
			c.Add(ctx, value, n)
		}
	}
	addBy(t.evictions, catalogThreads, o.EvictedThreads-t.last.EvictedThreads)
	addBy(t.evictions, catalogRuns, o.EvictedRuns-t.last.EvictedRuns)
	addBy(t.evictions, catalogRetained, o.EvictedRetained-t.last.EvictedRetained)
	if n := o.RefusedThreads - t.last.RefusedThreads; n != 0 || all {
		t.tb.ProcessctxCatalogThreadsRefused.Add(ctx, n)
	}
	t.last = o
	l := t.lastEnv
	addBy(t.envReads, "named", env.Named-l.Named)
	addBy(t.envReads, "unnamed", (env.Reads-env.Named)-(l.Reads-l.Named))
	addBy(t.envReads, "timeout", env.TimedOut-l.TimedOut)
	addBy(t.envReads, "refused", env.Refused-l.Refused)
	addBy(t.envReads, "failed", env.Failed-l.Failed)
	if n := env.Invalid - l.Invalid; n != 0 || all {
		t.tb.ProcessctxEnvironmentInvalid.Add(ctx, n)
	}
	t.lastEnv = env
}

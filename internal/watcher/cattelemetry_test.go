// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// gauge is the latest value of an int gauge with kind=kind (-1: none).
func gauge(tel *componenttest.Telemetry, name, kind string) int64 {
	return gaugeBy(tel, name, "kind", kind)
}

// gaugeBy is the value of a gauge's data point whose attribute key is value.
func gaugeBy(tel *componenttest.Telemetry, name, key, value string) int64 {
	m, err := tel.GetMetric(name)
	if err != nil {
		return -1
	}
	g, ok := m.Data.(metricdata.Gauge[int64])
	if !ok {
		return -1
	}
	for _, dp := range g.DataPoints {
		if v, ok := dp.Attributes.Value(attribute.Key(key)); ok && v.AsString() == value {
			return dp.Value
		}
	}
	return -1
}

// The catalog's occupancy is reported against its bounds: a real publisher
// is a live process, then, once it exited, a retained one.
func TestCatalogGauges(t *testing.T) {
	pub := testpub.Start(t, testpub.Glibc)
	pub.Set("service.name", "gauged")
	pub.Publish()
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	cfg := fastConfig(pub.PID)
	cfg.Limits.MaxProcesses, cfg.Limits.MaxRetainedProcesses, cfg.Limits.MaxThreads, cfg.Limits.MaxRuns = 10, 20, 300, 4000
	startWatcher(t, cfg, tel)
	eventually(t, "one live process in the catalog", func() bool {
		return gauge(tel, "otelcol_processctx_catalog_used", catalogProcesses) == 1
	})
	for kind, want := range map[string]int64{catalogProcesses: 10, catalogRetained: 20, catalogThreads: 300, catalogRuns: 4000} {
		if got := gauge(tel, "otelcol_processctx_catalog_limit", kind); got != want {
			t.Errorf("limit %s = %d, want %d", kind, got, want)
		}
	}
	pub.Exit()
	eventually(t, "one retained process in the catalog", func() bool {
		return gauge(tel, "otelcol_processctx_catalog_used", catalogRetained) == 1 &&
			gauge(tel, "otelcol_processctx_catalog_used", catalogProcesses) == 0
	})
}

// Evictions are counted as the catalog's running totals grow.
func TestCatalogEvictionsCounted(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	ct := newCatalogTelemetry(testTelemetry(t, tel))
	ctx := context.Background()
	ct.record(ctx, catalog.Occupancy{EvictedThreads: 2, EvictedRuns: 9, RefusedThreads: 1}, catalog.EnvStats{Reads: 3, Named: 1, Invalid: 1}, LimitsConfig{MaxProcesses: 5}, 0)
	ct.record(ctx, catalog.Occupancy{EvictedThreads: 3, EvictedRuns: 9, EvictedRetained: 4, RefusedThreads: 1},
		catalog.EnvStats{Reads: 5, Named: 2, TimedOut: 1, Invalid: 2, Memory: 300, MaxMemory: 1 << 20},
		LimitsConfig{MaxProcesses: 5, MaxProcessMemory: 4 << 20}, 1000)
	for part, want := range map[string][2]int64{"contexts": {1000, 2 << 20}, "environment": {300, 1 << 20}} {
		if got := gaugeBy(tel, "otelcol_processctx_process_memory", "part", part); got != want[0] {
			t.Errorf("process_memory{part=%s} = %d, want %d", part, got, want[0])
		}
		if got := gaugeBy(tel, "otelcol_processctx_process_memory_limit", "part", part); got != want[1] {
			t.Errorf("process_memory_limit{part=%s} = %d, want %d", part, got, want[1])
		}
	}
	for outcome, want := range map[string]int64{"named": 2, "unnamed": 3, "timeout": 1, "refused": 0} {
		if got := telemetrytest.Sum(tel, "otelcol_processctx_environment_reads", "outcome", outcome); got != want {
			t.Errorf("environment_reads{outcome=%s} = %d, want %d", outcome, got, want)
		}
	}
	if got := telemetrytest.Sum(tel, "otelcol_processctx_environment_invalid", "", ""); got != 2 {
		t.Errorf("environment_invalid = %d, want 2", got)
	}
	for kind, want := range map[string]int64{catalogThreads: 3, catalogRuns: 9, catalogRetained: 4} {
		if got := telemetrytest.Sum(tel, "otelcol_processctx_catalog_evictions", "kind", kind); got != want {
			t.Errorf("evictions{kind=%s} = %d, want %d", kind, got, want)
		}
	}
	if got := telemetrytest.Sum(tel, "otelcol_processctx_catalog_threads_refused", "", ""); got != 1 {
		t.Errorf("threads_refused = %d, want 1", got)
	}
}

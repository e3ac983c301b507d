// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/connector/cputimeconnector/internal/metadata"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
)

const (
	hostileSamples  = 25_000
	hostileMessages = 4
	// retainedBound is what the default limits may hold between flushes:
	// 2,000 series (resource and dimensions, 5 exemplars) and 1,000 span
	// records (top leaf functions), well under 1 KiB of Go heap each, with
	// room for the runtime's own growth. Unbounded, 100,000 distinct series
	// and spans would hold tens of MiB.
	retainedBound = 8 << 20
)

// hostileMessage: every sample its own span, endpoint and thread name, as
// a hostile or broken writer could publish.
func hostileMessage(round int) pprofile.Profiles {
	b := newProfBuilder()
	p := b.profile(map[string]any{"service.name": "hostile", "process.pid": int64(66)}, hz)
	for i := range hostileSamples {
		n := uint64(round*hostileSamples + i + 1)
		b.sample(p, b.link(n, n), b.stack(fmt.Sprintf("f%d", i%1000)), ticks(t0, 1, hz),
			b.attr("http.route", fmt.Sprintf("/r/%d", n)), b.attr("thread.name", fmt.Sprintf("t%d", n)))
	}
	return b.pd
}

// TestHostileMemory: messages in which every sample is its own span and
// endpoint leave at most aggregation_cardinality_limit series (the rest in
// the overflow point, counted) and span_records.max_per_interval records
// (the rest counted as folded), and the Go heap they retain between
// flushes stays under retainedBound however many such messages arrive.
func TestHostileMemory(t *testing.T) {
	cfg := defaultConfig()
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	set := connectortest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	ctx := context.Background()
	msink, lsink := new(consumertest.MetricsSink), new(consumertest.LogsSink)
	mc, err := NewFactory().CreateProfilesToMetrics(ctx, set, cfg, msink)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := NewFactory().CreateProfilesToLogs(ctx, set, cfg, lsink)
	if err != nil {
		t.Fatal(err)
	}
	m, l := mc.(*cpuConnector), lc.(*cpuConnector)

	before := heapInUse()
	for round := range hostileMessages {
		pd := hostileMessage(round)
		for _, c := range []*cpuConnector{m, l} {
			if err := c.ConsumeProfiles(ctx, pd); err != nil {
				t.Fatal(err)
			}
		}
	}
	retained := heapInUse() - before
	runtime.KeepAlive(m)
	runtime.KeepAlive(l)
	t.Logf("%d messages of %d samples, each its own span and endpoint: %d series held, %d span records, %.1f MiB retained",
		hostileMessages, hostileSamples, m.metrics().seriesCount(), len(l.logs().spans), float64(retained)/(1<<20))
	if n := m.metrics().seriesCount(); n != cfg.AggregationCardinalityLimit {
		t.Errorf("%d series held, want the limit %d", n, cfg.AggregationCardinalityLimit)
	}
	if n := len(l.logs().spans); n != cfg.SpanRecords.MaxPerInterval {
		t.Errorf("%d span records held, want the cap %d", n, cfg.SpanRecords.MaxPerInterval)
	}
	if retained > retainedBound {
		t.Errorf("%.1f MiB retained, bound %.1f MiB", float64(retained)/(1<<20), float64(retainedBound)/(1<<20))
	}
	total := int64(hostileMessages * hostileSamples)
	over := telemetrytest.Sum(tel, "otelcol_cputime_samples_overflow", "", "")
	if want := total - int64(cfg.AggregationCardinalityLimit); over != want {
		t.Errorf("overflow counted %d samples, want %d", over, want)
	}
	if folded := telemetrytest.Sum(tel, "otelcol_cputime_span_records_folded", "", ""); folded != total-int64(cfg.SpanRecords.MaxPerInterval) {
		t.Errorf("folded %d spans, want %d", folded, total-int64(cfg.SpanRecords.MaxPerInterval))
	}
	if n := telemetrytest.Sum(tel, "otelcol_cputime_samples_aggregated", "signal", "logs"); n != total {
		t.Errorf("logs output aggregated %d samples, want %d", n, total)
	}
	// Nothing is lost: the overflow point holds the rest of the CPU time.
	m.now = func() time.Time { return t0.Add(time.Minute) }
	m.flush(ctx)
	var secs float64
	for _, rm := range msink.AllMetrics()[0].ResourceMetrics().All() {
		for _, dp := range rm.ScopeMetrics().At(0).Metrics().At(0).Sum().DataPoints().All() {
			secs += dp.DoubleValue()
		}
	}
	if want := float64(total) * float64(int64(1e9)/hz) / 1e9; math.Abs(secs-want)/want > 1e-9 {
		t.Errorf("%v s in all points, want %v", secs, want)
	}
}

func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

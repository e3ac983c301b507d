// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"context"
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

const hz = 997

// demoMessage: a service with two routes (linked samples of two spans
// each), unlinked samples of the same thread, and a resource without a
// service.name.
func demoMessage() *profBuilder {
	b := newProfBuilder()
	p := b.profile(map[string]any{"service.name": "checkout", "process.pid": int64(42), "host.name": "h1"}, hz)
	tid, name := b.attr("thread.id", int64(4201)), b.attr("thread.name", "worker")
	cart, search := b.attr("http.route", "/cart"), b.attr("http.route", "/search")
	hot, cold := b.stack("hash"), b.stack("parse")
	// /cart: span 1 with 100 samples (80 in hash), span 2 with 50.
	b.sample(p, b.link(1, 1), hot, ticks(t0, 80, hz), tid, name, cart)
	b.sample(p, b.link(1, 1), cold, ticks(t0.Add(100*time.Millisecond), 20, hz), tid, name, cart)
	b.sample(p, b.link(2, 2), hot, ticks(t0.Add(200*time.Millisecond), 50, hz), tid, name, cart)
	// /search: span 3 with 30 samples.
	b.sample(p, b.link(3, 3), cold, ticks(t0.Add(300*time.Millisecond), 30, hz), tid, name, search)
	// No span: 40 samples.
	b.sample(p, 0, cold, ticks(t0.Add(400*time.Millisecond), 40, hz), tid, name)
	// No service: 10 samples, linked.
	q := b.profile(map[string]any{"process.pid": int64(7), "process.executable.name": "mystery"}, hz)
	b.sample(q, b.link(4, 4), hot, ticks(t0, 10, hz), b.attr("thread.name", "mystery"))
	return b
}

// point finds the data point of the series with resource service and
// attributes attrs (exactly).
func point(t *testing.T, md pmetric.Metrics, service string, attrs map[string]any) (pmetric.NumberDataPoint, bool) {
	t.Helper()
	for _, rm := range md.ResourceMetrics().All() {
		svc, _ := rm.Resource().Attributes().Get("service.name")
		if (service == "" && rm.Resource().Attributes().Len() != 0) || (service != "" && svc.AsString() != service) {
			continue
		}
		for _, sm := range rm.ScopeMetrics().All() {
			for _, m := range sm.Metrics().All() {
				if m.Name() != MetricName {
					t.Fatalf("metric %q", m.Name())
				}
				for _, dp := range m.Sum().DataPoints().All() {
					if equalRaw(dp.Attributes().AsRaw(), attrs) {
						return dp, true
					}
				}
			}
		}
	}
	return pmetric.NumberDataPoint{}, false
}

func equalRaw(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestMetricsBySeries: CPU time per service, route and thread name, with
// the spans as exemplars; samples without a span count under their service
// (no route); samples without a service under unknown_service:<exe>.
func TestMetricsBySeries(t *testing.T) {
	sink := new(consumertest.MetricsSink)
	c, _ := newMetrics(t, defaultConfig(), sink)
	if err := c.ConsumeProfiles(context.Background(), demoMessage().pd); err != nil {
		t.Fatal(err)
	}
	c.flush(context.Background())
	if len(sink.AllMetrics()) != 1 {
		t.Fatalf("%d flushes", len(sink.AllMetrics()))
	}
	md := sink.AllMetrics()[0]
	period := float64(int64(1e9)/hz) / 1e9 // the profile's period is whole nanoseconds
	for _, tc := range []struct {
		service   string
		attrs     map[string]any
		samples   int
		exemplars map[uint64]int // span → its samples
	}{
		{"checkout", map[string]any{"http.route": "/cart", "thread.name": "worker"}, 150, map[uint64]int{1: 100, 2: 50}},
		{"checkout", map[string]any{"http.route": "/search", "thread.name": "worker"}, 30, map[uint64]int{3: 30}},
		{"checkout", map[string]any{"thread.name": "worker"}, 40, nil},
		{"unknown_service:mystery", map[string]any{"thread.name": "mystery"}, 10, map[uint64]int{4: 10}},
	} {
		dp, ok := point(t, md, tc.service, tc.attrs)
		if !ok {
			t.Errorf("no point for %s %v", tc.service, tc.attrs)
			continue
		}
		if want := float64(tc.samples) * period; !near(dp.DoubleValue(), want) {
			t.Errorf("%s %v: %v s, want %v", tc.service, tc.attrs, dp.DoubleValue(), want)
		}
		if dp.Exemplars().Len() != len(tc.exemplars) {
			t.Errorf("%s %v: %d exemplars, want %d", tc.service, tc.attrs, dp.Exemplars().Len(), len(tc.exemplars))
		}
		for _, ex := range dp.Exemplars().All() {
			var found bool
			for sp, n := range tc.exemplars {
				if ex.SpanID() == spanID(sp) && ex.TraceID() == traceID(sp) {
					found = true
					if !near(ex.DoubleValue(), float64(n)*period) {
						t.Errorf("exemplar of span %d: %v s, want %v", sp, ex.DoubleValue(), float64(n)*period)
					}
				}
			}
			if !found {
				t.Errorf("%s %v: exemplar of span %v", tc.service, tc.attrs, ex.SpanID())
			}
		}
	}
	rm := md.ResourceMetrics().At(0)
	if got := rm.Resource().Attributes().AsRaw(); !equalRaw(got, map[string]any{"service.name": "checkout", "host.name": "h1"}) {
		t.Errorf("resource %v", got)
	}
	m := rm.ScopeMetrics().At(0).Metrics().At(0)
	if m.Unit() != "s" || !m.Sum().IsMonotonic() || m.Sum().AggregationTemporality() != pmetric.AggregationTemporalityCumulative {
		t.Errorf("metric %s unit %q monotonic %v temporality %v", m.Name(), m.Unit(), m.Sum().IsMonotonic(), m.Sum().AggregationTemporality())
	}
}

// TestTemporality: cumulative points keep adding up from their start;
// delta points hold each interval's CPU alone, and a series without
// samples in an interval is not sent.
func TestTemporality(t *testing.T) {
	for _, temp := range []string{Cumulative, Delta} {
		t.Run(temp, func(t *testing.T) {
			cfg := defaultConfig()
			cfg.AggregationTemporality = temp
			sink := new(consumertest.MetricsSink)
			c, now := newMetrics(t, cfg, sink)
			attrs := map[string]any{"http.route": "/cart", "thread.name": "worker"}
			for i := range 3 {
				*now = t0.Add(time.Duration(i) * 15 * time.Second)
				if i < 2 {
					if err := c.ConsumeProfiles(context.Background(), demoMessage().pd); err != nil {
						t.Fatal(err)
					}
				}
				*now = now.Add(time.Second)
				c.flush(context.Background())
			}
			all := sink.AllMetrics()
			one := 150 * float64(int64(1e9)/hz) / 1e9
			wantN, want := 3, []float64{one, 2 * one, 2 * one}
			if temp == Delta {
				wantN, want = 2, []float64{one, one}
			}
			if len(all) != wantN {
				t.Fatalf("%d flushes, want %d", len(all), wantN)
			}
			for i, md := range all {
				dp, ok := point(t, md, "checkout", attrs)
				if !ok {
					t.Fatalf("flush %d: no /cart point", i)
				}
				if !near(dp.DoubleValue(), want[i]) {
					t.Errorf("flush %d: %v, want %v", i, dp.DoubleValue(), want[i])
				}
				start := t0
				if temp == Delta {
					start = t0.Add(time.Duration(i)*15*time.Second - 14*time.Second)
					if i == 0 {
						start = t0
					}
				}
				if dp.StartTimestamp().AsTime() != start {
					t.Errorf("flush %d: start %v, want %v", i, dp.StartTimestamp().AsTime(), start)
				}
				wantEx := 2
				if temp == Cumulative && i == 2 {
					wantEx = 0 // exemplars are each interval's
				}
				if dp.Exemplars().Len() != wantEx {
					t.Errorf("flush %d: %d exemplars, want %d", i, dp.Exemplars().Len(), wantEx)
				}
			}
		})
	}
}

// TestCardinalityLimit: past aggregation_cardinality_limit series, the
// samples of new series go to one overflow point carrying only
// otel.metric.overflow=true, and are counted; no CPU is lost.
func TestCardinalityLimit(t *testing.T) {
	cfg := defaultConfig()
	cfg.AggregationCardinalityLimit = 3
	sink := new(consumertest.MetricsSink)
	c, _ := newMetrics(t, cfg, sink)
	b := newProfBuilder()
	p := b.profile(map[string]any{"service.name": "api"}, hz)
	for i := range 10 {
		b.sample(p, b.link(uint64(i+1), uint64(i+1)), b.stack("f"), ticks(t0, i+1, hz), b.attr("http.route", "/r"+string(rune('a'+i))))
	}
	if err := c.ConsumeProfiles(context.Background(), b.pd); err != nil {
		t.Fatal(err)
	}
	if got := c.metrics().seriesCount(); got != 3 {
		t.Errorf("%d series held, want 3", got)
	}
	c.flush(context.Background())
	md := sink.AllMetrics()[0]
	dp, ok := point(t, md, "", map[string]any{overflowKey: "true"})
	if !ok {
		t.Fatal("no overflow point")
	}
	var total float64
	for _, rm := range md.ResourceMetrics().All() {
		for _, d := range rm.ScopeMetrics().At(0).Metrics().At(0).Sum().DataPoints().All() {
			total += d.DoubleValue()
		}
	}
	period := float64(int64(1e9)/hz) / 1e9
	if want := 55 * period; !near(total, want) {
		t.Errorf("total %v s, want %v", total, want)
	}
	if dp.DoubleValue() <= 0 {
		t.Errorf("overflow point %v", dp.DoubleValue())
	}
}

// TestExemplarsBounded: at most max_per_data_point exemplars a point.
func TestExemplarsBounded(t *testing.T) {
	cfg := defaultConfig()
	cfg.Exemplars.MaxPerDataPoint = 2
	sink := new(consumertest.MetricsSink)
	c, _ := newMetrics(t, cfg, sink)
	b := newProfBuilder()
	p := b.profile(map[string]any{"service.name": "api"}, hz)
	for i := range 10 {
		b.sample(p, b.link(uint64(i+1), uint64(i+1)), b.stack("f"), ticks(t0, 1, hz), b.attr("http.route", "/r"))
	}
	for range 2 {
		if err := c.ConsumeProfiles(context.Background(), b.pd); err != nil {
			t.Fatal(err)
		}
	}
	c.flush(context.Background())
	dp, _ := point(t, sink.AllMetrics()[0], "api", map[string]any{"http.route": "/r"})
	if dp.Exemplars().Len() != 2 {
		t.Errorf("%d exemplars, want 2", dp.Exemplars().Len())
	}
}

// record finds the span record of span n.
func record(ld plog.Logs, n uint64) (pcommon.Map, plog.LogRecord, bool) {
	for _, rl := range ld.ResourceLogs().All() {
		for _, lr := range rl.ScopeLogs().At(0).LogRecords().All() {
			if lr.SpanID() == spanID(n) {
				return rl.Resource().Attributes(), lr, true
			}
		}
	}
	return pcommon.Map{}, plog.LogRecord{}, false
}

// TestSpanRecords: one record per span with its trace and span ids, CPU
// time, sample count, route and top leaf functions; none for samples
// without a span.
func TestSpanRecords(t *testing.T) {
	sink := new(consumertest.LogsSink)
	c := newLogs(t, defaultConfig(), sink)
	if err := c.ConsumeProfiles(context.Background(), demoMessage().pd); err != nil {
		t.Fatal(err)
	}
	c.flush(context.Background())
	ld := sink.AllLogs()[0]
	if ld.LogRecordCount() != 4 {
		t.Errorf("%d records, want 4 (one per span)", ld.LogRecordCount())
	}
	period := float64(int64(1e9)/hz) / 1e9
	res, lr, ok := record(ld, 1)
	if !ok {
		t.Fatal("no record of span 1")
	}
	if lr.TraceID() != traceID(1) || lr.EventName() != EventName {
		t.Errorf("trace %v event %q", lr.TraceID(), lr.EventName())
	}
	at := lr.Attributes().AsRaw()
	if !near(at[AttrCPUTime].(float64), 100*period) || at[AttrSampleCount] != int64(100) || at["http.route"] != "/cart" {
		t.Errorf("attributes %v", at)
	}
	top := at[AttrTopFunctions].([]any)
	if len(top) != 2 || top[0].(map[string]any)["function"] != "hash" || top[0].(map[string]any)["samples"] != int64(80) {
		t.Errorf("top functions %v", top)
	}
	if s, _ := res.Get("service.name"); s.Str() != "checkout" {
		t.Errorf("resource %v", res.AsRaw())
	}
	if lr.Timestamp().AsTime() != ticks(t0.Add(100*time.Millisecond), 20, hz)[19] {
		t.Errorf("timestamp %v: want the span's last sample", lr.Timestamp().AsTime())
	}
	if res, _, ok := record(ld, 4); !ok {
		t.Error("no record of span 4")
	} else if s, _ := res.Get("service.name"); s.Str() != "unknown_service:mystery" {
		t.Errorf("span 4's resource %v", res.AsRaw())
	}
	// The next interval starts empty.
	c.flush(context.Background())
	if len(sink.AllLogs()) != 1 {
		t.Errorf("an empty interval sent %d messages", len(sink.AllLogs())-1)
	}
}

// TestSpanRecordsCapped: past max_per_interval spans, further spans get
// no record and are counted as folded.
func TestSpanRecordsCapped(t *testing.T) {
	cfg := defaultConfig()
	cfg.SpanRecords.MaxPerInterval = 5
	sink := new(consumertest.LogsSink)
	c := newLogs(t, cfg, sink)
	b := newProfBuilder()
	p := b.profile(map[string]any{"service.name": "api"}, hz)
	for i := range 12 {
		b.sample(p, b.link(uint64(i+1), uint64(i+1)), b.stack("f"), ticks(t0, 1, hz))
	}
	var m spanMessage
	m.read(c.cfg, b.pd)
	c.logs().merge(&m)
	if m.counts.folded != 7 {
		t.Errorf("%d folded, want 7", m.counts.folded)
	}
	c.flush(context.Background())
	if n := sink.AllLogs()[0].LogRecordCount(); n != 5 {
		t.Errorf("%d records, want 5", n)
	}
}

// TestSkipped: an off-CPU profile (nanoseconds blocked, not CPU) and
// samples whose indices are outside their tables are not counted, and are
// counted as skipped by reason.
func TestSkipped(t *testing.T) {
	sink := new(consumertest.MetricsSink)
	c, _ := newMetrics(t, defaultConfig(), sink)
	b := newProfBuilder()
	off := b.profile(map[string]any{"service.name": "api"}, hz)
	off.SampleType().SetTypeStrindex(b.str("events"))
	off.SampleType().SetUnitStrindex(b.str("nanoseconds"))
	off.PeriodType().SetTypeStrindex(b.str("off_cpu"))
	s := b.sample(off, 0, 0, ticks(t0, 1, hz))
	s.Values().Append(5e6)
	p := b.profile(map[string]any{"service.name": "api"}, hz)
	b.sample(p, 99, 0, ticks(t0, 1, hz))
	b.sample(p, 0, 99, ticks(t0, 1, hz))
	b.sample(p, 0, 0, ticks(t0, 1, hz), 1000)
	b.sample(p, 0, 0, ticks(t0, 1, hz)).Values().Append(-1)
	b.sample(p, 0, 0, ticks(t0, 3, hz)) // valid: 3 samples
	var m seriesMessage
	m.read(c.cfg, b.pd)
	want := counts{unlinked: 1}
	want.notCPU = 1
	want.invalid = [8]int64{0, 1, 1, 1, 1}
	if m.counts != want {
		t.Errorf("counts %+v, want %+v", m.counts, want)
	}
	if len(m.perSeries) != 1 || m.perSeries[0].n != 3 {
		t.Errorf("series %+v", m.perSeries)
	}
}

// TestNanosecondsProfile: a profile whose sample type is cpu/nanoseconds
// counts its values.
func TestNanosecondsProfile(t *testing.T) {
	sink := new(consumertest.MetricsSink)
	c, _ := newMetrics(t, defaultConfig(), sink)
	b := newProfBuilder()
	p := b.profile(map[string]any{"service.name": "go"}, hz)
	p.SampleType().SetTypeStrindex(b.str("cpu"))
	p.SampleType().SetUnitStrindex(b.str("nanoseconds"))
	b.sample(p, 0, 0, nil).Values().Append(30e6, 20e6)
	if err := c.ConsumeProfiles(context.Background(), b.pd); err != nil {
		t.Fatal(err)
	}
	c.flush(context.Background())
	dp, ok := point(t, sink.AllMetrics()[0], "go", map[string]any{})
	if !ok || !near(dp.DoubleValue(), 0.05) {
		t.Errorf("point %v %v, want 0.05 s", ok, dp.DoubleValue())
	}
}

// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/connector/cputimeconnector/internal/metadata"
)

// MetricName is the CPU time sum (Prometheus: profiles_cpu_time_seconds_total).
const MetricName = "profiles.cpu.time"

// metricsAgg is the metrics output's aggregate: the series of the CPU
// time sum (at most aggregation_cardinality_limit, and the overflow
// point), flushed every metrics_flush_interval.
type metricsAgg struct {
	cfg  *Config
	next consumer.Metrics
	// scratch reuses messages' local aggregates between calls.
	scratch sync.Pool

	mu       sync.Mutex // guards the rest
	series   map[string]*series
	overflow *series // nil until a sample overflows
	// intervalStart: the delta points' start.
	intervalStart time.Time
}

type series struct {
	resKey    string
	resAttrs  []kv
	dims      []kv
	cpu, n    int64 // nanoseconds, samples
	start     time.Time
	updated   time.Time
	exemplars []exemplar // this interval's
}

type exemplar struct {
	trace pcommon.TraceID
	span  pcommon.SpanID
	cpu   int64
	time  uint64
}

func newMetricsAgg(cfg *Config, next consumer.Metrics, now time.Time) *metricsAgg {
	return &metricsAgg{cfg: cfg, next: next, series: map[string]*series{}, intervalStart: now}
}

func (*metricsAgg) signal() signal            { return signalMetrics }
func (a *metricsAgg) interval() time.Duration { return a.cfg.MetricsFlushInterval }

func (a *metricsAgg) consume(pd pprofile.Profiles, now func() time.Time) counts {
	m, _ := a.scratch.Get().(*seriesMessage)
	if m == nil {
		m = &seriesMessage{}
		m.rd.SetKeys(dimensionNames(a.cfg), true) // every sample's dimensions
	}
	m.read(a.cfg, pd)
	a.mu.Lock()
	a.merge(m, now())
	a.mu.Unlock()
	cnt := m.counts
	if m.reusable() {
		a.scratch.Put(m)
	}
	return cnt
}

// merge adds a message's local series to the interval's.
func (a *metricsAgg) merge(m *seriesMessage, now time.Time) {
	limit := a.cfg.AggregationCardinalityLimit
	for i := range m.perSeries {
		ls := &m.perSeries[i]
		res := m.resources[ls.key.res]
		dims, key := m.dims(a.cfg, ls.key)
		s := a.series[string(key)] // no allocation for the lookup
		if s == nil {
			if len(a.series) >= limit {
				if a.overflow == nil {
					a.overflow = &series{start: now, dims: []kv{{overflowKey, "true", true}}}
				}
				a.overflow.cpu += ls.cpu
				a.overflow.n += ls.n
				a.overflow.updated = now
				m.counts.overflow += ls.n
				continue
			}
			s = &series{resKey: res.key, resAttrs: res.attrs, dims: slices.Clone(dims), start: now}
			a.series[string(key)] = s
		}
		s.cpu += ls.cpu
		s.n += ls.n
		s.updated = now
		for _, le := range ls.exemplars {
			tr, sp := m.rd.Link(le.link)
			s.addExemplar(a.cfg.Exemplars.MaxPerDataPoint, exemplar{tr, sp, le.cpu, le.time})
		}
	}
}

// addExemplar keeps the first max spans of the interval, each with the CPU
// time of its samples in the series.
func (s *series) addExemplar(maxN int, e exemplar) {
	for i := range s.exemplars {
		if x := &s.exemplars[i]; x.trace == e.trace && x.span == e.span {
			x.cpu += e.cpu
			x.time = max(x.time, e.time)
			return
		}
	}
	if len(s.exemplars) < maxN {
		s.exemplars = append(s.exemplars, e)
	}
}

func (a *metricsAgg) flush(ctx context.Context, now time.Time) error {
	a.mu.Lock()
	md, n := a.take(now)
	a.mu.Unlock()
	if n == 0 {
		return nil
	}
	return a.next.ConsumeMetrics(ctx, md)
}

// take returns the interval's metric (n: its data points) and starts the
// next interval: delta forgets every series, cumulative keeps them but for
// those not updated within metrics_expiration.
func (a *metricsAgg) take(now time.Time) (pmetric.Metrics, int) {
	cfg := a.cfg
	md := pmetric.NewMetrics()
	delta := cfg.AggregationTemporality == Delta
	keys := make([]string, 0, len(a.series))
	for k := range a.series {
		keys = append(keys, k)
	}
	slices.Sort(keys) // series of one resource are adjacent: the key starts with it
	var sum pmetric.Sum
	lastRes := "\xff"
	n := 0
	point := func(s *series) {
		start := s.start
		if delta {
			start = a.intervalStart
		}
		s.point(sum.DataPoints().AppendEmpty(), start, now)
		n++
	}
	newSum := func(rm pmetric.ResourceMetrics) {
		sm := rm.ScopeMetrics().AppendEmpty()
		sm.Scope().SetName(metadata.ScopeName)
		mt := sm.Metrics().AppendEmpty()
		mt.SetName(MetricName)
		mt.SetUnit("s")
		mt.SetDescription("CPU time of the profile samples, by service and the configured dimensions.")
		sum = mt.SetEmptySum()
		sum.SetIsMonotonic(true)
		if delta {
			sum.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
		} else {
			sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		}
	}
	for _, k := range keys {
		s := a.series[k]
		if s.resKey != lastRes {
			lastRes = s.resKey
			rm := md.ResourceMetrics().AppendEmpty()
			for _, r := range s.resAttrs {
				rm.Resource().Attributes().PutStr(r.key, r.value)
			}
			newSum(rm)
		}
		point(s)
	}
	if a.overflow != nil {
		newSum(md.ResourceMetrics().AppendEmpty())
		point(a.overflow)
	}
	// The next interval.
	a.intervalStart = now
	if delta {
		clear(a.series)
		a.overflow = nil
		return md, n
	}
	for k, s := range a.series {
		s.exemplars = s.exemplars[:0]
		if cfg.MetricsExpiration > 0 && now.Sub(s.updated) > cfg.MetricsExpiration {
			delete(a.series, k)
		}
	}
	if a.overflow != nil {
		a.overflow.exemplars = nil
	}
	return md, n
}

// seriesCount is how many series (the overflow point excluded) are held.
func (a *metricsAgg) seriesCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.series)
}

// point writes s into dp.
func (s *series) point(dp pmetric.NumberDataPoint, start, now time.Time) {
	for _, d := range s.dims {
		dp.Attributes().PutStr(d.key, d.value)
	}
	dp.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
	dp.SetTimestamp(pcommon.NewTimestampFromTime(now))
	dp.SetDoubleValue(float64(s.cpu) / 1e9)
	for _, e := range s.exemplars {
		ex := dp.Exemplars().AppendEmpty()
		ex.SetTraceID(e.trace)
		ex.SetSpanID(e.span)
		ex.SetDoubleValue(float64(e.cpu) / 1e9)
		ex.SetTimestamp(pcommon.Timestamp(e.time))
	}
}

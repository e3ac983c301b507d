// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"slices"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/otelctx/otelctx/connector/cputimeconnector/internal/metadata"
)

// MetricName is the CPU time sum (Prometheus: profiles_cpu_time_seconds_total).
const MetricName = "profiles.cpu.time"

// metricsAgg holds the series of the CPU time sum: at most
// aggregation_cardinality_limit, and the overflow point.
type metricsAgg struct {
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

func newMetricsAgg(_ *Config, now time.Time) *metricsAgg {
	return &metricsAgg{series: map[string]*series{}, intervalStart: now}
}

// merge adds a message's local series to the interval's.
func (a *metricsAgg) merge(c *cpuConnector, m *message) {
	now := c.now()
	limit := c.cfg.AggregationCardinalityLimit
	for i := range m.perSeries {
		ls := &m.perSeries[i]
		res := m.resources[ls.key.res]
		dims, key := m.dims(c, ls.key)
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
			s.addExemplar(c.cfg.Exemplars.MaxPerDataPoint, exemplar{tr, sp, le.cpu, le.time})
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

// flush returns the interval's metric (n: its data points) and starts the
// next interval: delta forgets every series, cumulative keeps them but for
// those not updated within metrics_expiration.
func (a *metricsAgg) flush(cfg *Config, now time.Time) (pmetric.Metrics, int) {
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
func (a *metricsAgg) seriesCount() int { return len(a.series) }

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

// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/cputime"
)

// UnknownService is the service.name of samples whose resource has none
// (the OTel resource semantic conventions' fallback, with
// process.executable.name after a colon when the resource has it).
const UnknownService = "unknown_service"

// overflowKey marks the one point that counts the series past
// aggregation_cardinality_limit (the OTel metrics SDK's name for it).
const overflowKey = "otel.metric.overflow"

// cpuConnector is one output of a cputime connector: the collector creates
// one for profiles → metrics and one for profiles → logs, and each reads
// every sample.
type cpuConnector struct {
	cfg    *Config
	signal signal
	logger *zap.Logger
	tel    *telemetry
	now    func() time.Time

	// dimIndex: dimension name → its position.
	dimIndex map[string]int

	mu      sync.Mutex // guards metrics and spans
	metrics *metricsAgg
	spans   *spanAgg

	flushMetrics consumer.Metrics
	flushLogs    consumer.Logs

	stop chan struct{}
	done chan struct{}
}

type signal uint8

const (
	signalMetrics signal = iota
	signalLogs
	numSignals
)

var signalNames = [numSignals]string{"metrics", "logs"}

func newConnector(set connector.Settings, cfg *Config, sig signal) (*cpuConnector, error) {
	tel, err := newTelemetry(set.TelemetrySettings, sig)
	if err != nil {
		return nil, err
	}
	c := &cpuConnector{cfg: cfg, signal: sig, logger: set.Logger, tel: tel, now: time.Now, dimIndex: map[string]int{}}
	for i, d := range cfg.Dimensions {
		c.dimIndex[d.Name] = i
	}
	return c, nil
}

func (c *cpuConnector) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (c *cpuConnector) Start(context.Context, component.Host) error {
	interval := c.cfg.MetricsFlushInterval
	if c.signal == signalLogs {
		interval = c.cfg.SpanRecords.FlushInterval
	}
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(c.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
				c.flush(context.Background())
			}
		}
	}()
	return nil
}

// Shutdown stops the flushes and sends what the last interval holds.
func (c *cpuConnector) Shutdown(ctx context.Context) error {
	if c.stop != nil {
		close(c.stop)
		<-c.done
		c.stop = nil
		c.flush(ctx)
	}
	c.tel.Shutdown()
	return nil
}

// flush sends the interval's metric or span records, if any.
func (c *cpuConnector) flush(ctx context.Context) {
	now := c.now()
	var err error
	switch c.signal {
	case signalMetrics:
		c.mu.Lock()
		md, n := c.metrics.flush(c.cfg, now)
		c.mu.Unlock()
		if n > 0 {
			err = c.flushMetrics.ConsumeMetrics(ctx, md)
		}
	case signalLogs:
		c.mu.Lock()
		ld, n := c.spans.flush(c.cfg, now)
		c.mu.Unlock()
		if n > 0 {
			err = c.flushLogs.ConsumeLogs(ctx, ld)
		}
	}
	if err != nil {
		c.logger.Warn("cputime: the next consumer refused the interval's data", zap.String("signal", signalNames[c.signal]), zap.Error(err))
	}
}

// ConsumeProfiles reads every sample of pd into this output's aggregate.
func (c *cpuConnector) ConsumeProfiles(ctx context.Context, pd pprofile.Profiles) error {
	var m message
	m.read(c, pd)
	c.mu.Lock()
	switch c.signal {
	case signalMetrics:
		c.metrics.merge(c, &m)
	case signalLogs:
		c.spans.merge(c, &m)
	}
	c.mu.Unlock()
	c.tel.record(ctx, &m.counts)
	return nil
}

// resource is what a ResourceProfiles gives its samples' output.
type resource struct {
	// key identifies the output resource: the configured attributes'
	// values, each after its key.
	key   string
	attrs []kv
	// dims: per dimension, the resource's value (the fallback when the
	// sample lacks it); ok false when the resource has none either.
	dims    [MaxDimensions]kv
	unknown bool // service.name is the fallback
}

type kv struct {
	key, value string
	ok         bool
}

func newResource(c *cpuConnector, rp pprofile.ResourceProfiles) *resource {
	ra := rp.Resource().Attributes()
	r := &resource{}
	var b strings.Builder
	add := func(k, v string) {
		r.attrs = append(r.attrs, kv{k, v, true})
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(v)
		b.WriteByte(0)
	}
	svc := ""
	if v, ok := ra.Get("service.name"); ok {
		svc = v.AsString()
	}
	if svc == "" {
		r.unknown = true
		svc = UnknownService
		if v, ok := ra.Get("process.executable.name"); ok && v.AsString() != "" {
			svc += ":" + v.AsString()
		}
	}
	add("service.name", svc)
	for _, k := range c.cfg.ResourceAttributes {
		if k == "service.name" {
			continue
		}
		if v, ok := ra.Get(k); ok {
			add(k, v.AsString())
		}
	}
	r.key = b.String()
	for i, d := range c.cfg.Dimensions {
		if v, ok := ra.Get(d.Name); ok {
			r.dims[i] = kv{d.Name, v.AsString(), true}
		}
	}
	return r
}

// seriesKey names a series within one message: the resource and, per
// dimension, the sample's attribute index (-1: the sample has none).
type seriesKey struct {
	res  int32
	dims [MaxDimensions]int32
}

// message is one ConsumeProfiles call's reading: its resources, and for
// each valid CPU sample, its series and span, aggregated locally (no lock,
// no allocation per sample) before one merge into the interval.
type message struct {
	rd        *cputime.Reader
	resources []*resource
	// dimOf caches, per attribute index: 0 not looked at, 1 no dimension,
	// k+2 dimension k.
	dimOf []int8

	series    map[seriesKey]int32
	perSeries []localSeries

	spans    map[spanKey]int32
	perSpan  []localSpan
	maxLinks int // exemplars per local series

	counts counts
}

type localSeries struct {
	key       seriesKey
	cpu, n    int64
	exemplars []localExemplar
}

type localExemplar struct {
	link int32
	cpu  int64
	time uint64
}

type spanKey struct {
	res  int32
	link int32
}

type localSpan struct {
	key         seriesKey // the dimensions of the span's first sample
	link        int32
	cpu, n      int64
	first, last uint64
	leaves      []leafCount
}

type leafCount struct {
	frame cputime.Frame
	n     int64
}

// counts are one message's outcomes, recorded once per message.
type counts struct {
	linked, unlinked, unknownService int64
	notCPU                           int64
	invalid                          [8]int64 // by cputime.Invalid
	overflow                         int64
	folded                           int64
}

func (m *message) read(c *cpuConnector, pd pprofile.Profiles) {
	m.rd = cputime.NewReader(pd.Dictionary())
	if c.signal == signalMetrics {
		m.series = map[seriesKey]int32{}
		if c.cfg.Exemplars.Enabled {
			m.maxLinks = c.cfg.Exemplars.MaxPerDataPoint
		}
	} else {
		m.spans = map[spanKey]int32{}
	}
	nDims := len(c.cfg.Dimensions)
	var s cputime.Sample
	for _, rp := range pd.ResourceProfiles().All() {
		var res *resource
		resIdx := int32(len(m.resources))
		for _, sp := range rp.ScopeProfiles().All() {
			for _, p := range sp.Profiles().All() {
				samples := p.Samples()
				if samples.Len() == 0 {
					continue
				}
				unit, period := cputime.Classify(pd.Dictionary(), p)
				if unit == cputime.NotCPU {
					m.counts.notCPU += int64(samples.Len())
					continue
				}
				if res == nil {
					res = newResource(c, rp)
					m.resources = append(m.resources, res)
				}
				last, lastSlot := seriesKey{res: -1}, int32(-1)
				for _, smp := range samples.All() {
					if why := m.rd.Read(smp, unit, period, &s); why != cputime.Valid {
						m.counts.invalid[why]++
						continue
					}
					key := seriesKey{res: resIdx}
					for i := range nDims {
						key.dims[i] = -1
					}
					for _, a := range s.Attrs.All() {
						if d := m.dimension(c, a); d >= 0 && key.dims[d] < 0 {
							key.dims[d] = a
						}
					}
					if s.Link >= 0 {
						m.counts.linked++
					} else {
						m.counts.unlinked++
					}
					if res.unknown {
						m.counts.unknownService++
					}
					if m.series != nil {
						// Consecutive samples of one thread share a key.
						if key != last {
							last, lastSlot = key, m.seriesSlot(key)
						}
						m.addSeries(lastSlot, &s)
					} else if s.Link >= 0 {
						m.addSpan(c, key, &s)
					}
				}
			}
		}
	}
}

// dimension returns the dimension attribute index a fills, or -1.
func (m *message) dimension(c *cpuConnector, a int32) int {
	if m.dimOf == nil {
		m.dimOf = make([]int8, m.rd.AttributeCount())
	}
	switch d := m.dimOf[a]; d {
	case 0:
		d = 1
		if i, ok := c.dimIndex[m.rd.AttrKey(a)]; ok {
			d = int8(i + 2)
		}
		m.dimOf[a] = d
		return int(d) - 2
	default:
		return int(d) - 2
	}
}

func (m *message) seriesSlot(key seriesKey) int32 {
	if i, ok := m.series[key]; ok {
		return i
	}
	i := int32(len(m.perSeries))
	m.perSeries = append(m.perSeries, localSeries{key: key})
	m.series[key] = i
	return i
}

func (m *message) addSeries(slot int32, s *cputime.Sample) {
	ls := &m.perSeries[slot]
	ls.cpu += s.CPUNanos
	ls.n += s.Count
	if s.Link < 0 || m.maxLinks == 0 {
		return
	}
	for i := range ls.exemplars {
		if e := &ls.exemplars[i]; e.link == s.Link {
			e.cpu += s.CPUNanos
			e.time = max(e.time, s.Time)
			return
		}
	}
	if len(ls.exemplars) < m.maxLinks {
		ls.exemplars = append(ls.exemplars, localExemplar{link: s.Link, cpu: s.CPUNanos, time: s.Time})
	}
}

func (m *message) addSpan(c *cpuConnector, key seriesKey, s *cputime.Sample) {
	k := spanKey{res: key.res, link: s.Link}
	i, ok := m.spans[k]
	if !ok {
		i = int32(len(m.perSpan))
		m.perSpan = append(m.perSpan, localSpan{key: key, link: s.Link, first: s.Time})
		m.spans[k] = i
	}
	ls := &m.perSpan[i]
	ls.cpu += s.CPUNanos
	ls.n += s.Count
	if s.Time != 0 && (ls.first == 0 || s.Time < ls.first) {
		ls.first = s.Time
	}
	ls.last = max(ls.last, s.Time)
	if c.cfg.SpanRecords.TopFunctions == 0 {
		return
	}
	f, ok := m.rd.Leaf(s.Stack)
	if !ok {
		return
	}
	ls.leaves = addLeaf(ls.leaves, f, s.Count)
}

// addLeaf counts n samples of frame f, past maxLeavesPerSpan distinct
// frames under the empty Frame ("other").
func addLeaf(leaves []leafCount, f cputime.Frame, n int64) []leafCount {
	for i := range leaves {
		if leaves[i].frame == f {
			leaves[i].n += n
			return leaves
		}
	}
	if len(leaves) >= maxLeavesPerSpan {
		f = cputime.Frame{}
		for i := range leaves {
			if leaves[i].frame == f {
				leaves[i].n += n
				return leaves
			}
		}
		leaves[len(leaves)-1].frame, leaves[len(leaves)-1].n = f, leaves[len(leaves)-1].n+n
		return leaves
	}
	return append(leaves, leafCount{f, n})
}

// dims returns the data point attributes of a local key: each dimension's
// value from the sample, else from the resource.
func (m *message) dims(c *cpuConnector, key seriesKey) []kv {
	res := m.resources[key.res]
	var out []kv
	for i, d := range c.cfg.Dimensions {
		if a := key.dims[i]; a >= 0 {
			out = append(out, kv{d.Name, m.rd.AttrValue(a).AsString(), true})
		} else if res.dims[i].ok {
			out = append(out, res.dims[i])
		}
	}
	return out
}

// dimsKey appends the dimensions' identity to a resource's key.
func dimsKey(res *resource, dims []kv) string {
	var b strings.Builder
	b.WriteString(res.key)
	b.WriteByte(1)
	for _, d := range dims {
		b.WriteString(d.key)
		b.WriteByte(0)
		b.WriteString(d.value)
		b.WriteByte(0)
	}
	return b.String()
}

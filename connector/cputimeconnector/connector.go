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
)

// UnknownService is the service.name of samples whose resource has none
// (the OTel resource semantic conventions' fallback, with
// process.executable.name after a colon when the resource has it).
const UnknownService = "unknown_service"

// overflowKey marks the one point that counts the series past
// aggregation_cardinality_limit (the OTel metrics SDK's name for it).
const overflowKey = "otel.metric.overflow"

// cpuConnector is one output of a cpu_time connector: the collector creates
// one for profiles → metrics and one for profiles → logs, and each reads
// every sample.
type cpuConnector struct {
	cfg    *Config
	signal signal
	logger *zap.Logger
	tel    *telemetry
	now    func() time.Time

	// dimNames: the dimensions' names, in order.
	dimNames []string

	mu      sync.Mutex // guards metrics and spans
	metrics *metricsAgg
	spans   *spanAgg

	flushMetrics consumer.Metrics
	flushLogs    consumer.Logs

	stop chan struct{}
	done chan struct{}

	// scratch reuses messages' local aggregates between calls.
	scratch sync.Pool
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
	c := &cpuConnector{cfg: cfg, signal: sig, logger: set.Logger, tel: tel, now: time.Now}
	for _, d := range cfg.Dimensions {
		c.dimNames = append(c.dimNames, d.Name)
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
		c.logger.Warn("cpu_time: the next consumer refused the interval's data", zap.String("signal", signalNames[c.signal]), zap.Error(err))
	}
}

// ConsumeProfiles reads every sample of pd into this output's aggregate.
func (c *cpuConnector) ConsumeProfiles(ctx context.Context, pd pprofile.Profiles) error {
	m, _ := c.scratch.Get().(*message)
	if m == nil {
		m = &message{}
		// The metric needs every sample's dimensions, span records their
		// first sample's.
		m.rd.SetKeys(c.dimNames, c.signal == signalMetrics)
	}
	m.read(c, pd)
	c.mu.Lock()
	switch c.signal {
	case signalMetrics:
		c.metrics.merge(c, m)
	case signalLogs:
		c.spans.merge(c, m)
	}
	c.mu.Unlock()
	c.tel.record(ctx, &m.counts)
	if m.reusable() {
		c.scratch.Put(m)
	}
	return nil
}

// maxScratch: a message whose local aggregate grew past this many series
// or spans (a hostile one) is not kept for reuse.
const maxScratch = 1 << 16

func (m *message) reusable() bool {
	return len(m.perSeries) <= maxScratch && len(m.perSpan) <= maxScratch && len(m.spanOf) <= 4*maxScratch &&
		len(m.leafSamples) <= 4*maxScratch && len(m.leafOf) <= 4*maxScratch && m.rd.AttributeCount() <= 4*maxScratch && len(m.exOf) <= 4*maxScratch &&
		len(m.seriesTable) <= 4*maxScratch
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

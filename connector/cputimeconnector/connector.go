// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"context"
	"strings"
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
// every sample into its aggregator.
type cpuConnector struct {
	cfg    *Config
	logger *zap.Logger
	tel    *telemetry
	now    func() time.Time
	agg    aggregator

	stop chan struct{}
	done chan struct{}
}

// aggregator is one output's aggregate of an interval: the metric's series
// (metricsAgg) or the span records (spanAgg). Safe for concurrent use.
type aggregator interface {
	signal() signal
	// interval is how often flush is called.
	interval() time.Duration
	// consume reads pd's samples into the interval (at now()) and returns
	// the message's outcomes.
	consume(pd pprofile.Profiles, now func() time.Time) counts
	// flush sends the interval's data, if any, to the next consumer and
	// starts the next interval.
	flush(ctx context.Context, now time.Time) error
}

type signal uint8

const (
	signalMetrics signal = iota
	signalLogs
	numSignals
)

var signalNames = [numSignals]string{"metrics", "logs"}

func newConnector(set connector.Settings, cfg *Config, agg aggregator) (*cpuConnector, error) {
	tel, err := newTelemetry(set.TelemetrySettings, agg.signal())
	if err != nil {
		return nil, err
	}
	return &cpuConnector{cfg: cfg, logger: set.Logger, tel: tel, now: time.Now, agg: agg}, nil
}

func (c *cpuConnector) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (c *cpuConnector) Start(context.Context, component.Host) error {
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(c.done)
		t := time.NewTicker(c.agg.interval())
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
	if err := c.agg.flush(ctx, c.now()); err != nil {
		c.logger.Warn("cpu_time: the next consumer refused the interval's data", zap.String("signal", signalNames[c.agg.signal()]), zap.Error(err))
	}
}

// ConsumeProfiles reads every sample of pd into this output's aggregate.
func (c *cpuConnector) ConsumeProfiles(ctx context.Context, pd pprofile.Profiles) error {
	cnt := c.agg.consume(pd, c.now)
	c.tel.record(ctx, &cnt)
	return nil
}

// maxScratch: a message whose local aggregate grew past this many series
// or spans (a hostile one) is not kept for reuse.
const maxScratch = 1 << 16

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

func newResource(cfg *Config, rp pprofile.ResourceProfiles) *resource {
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
	for _, k := range cfg.ResourceAttributes {
		if k == "service.name" {
			continue
		}
		if v, ok := ra.Get(k); ok {
			add(k, v.AsString())
		}
	}
	r.key = b.String()
	for i, d := range cfg.Dimensions {
		if v, ok := ra.Get(d.Name); ok {
			r.dims[i] = kv{d.Name, v.AsString(), true}
		}
	}
	return r
}

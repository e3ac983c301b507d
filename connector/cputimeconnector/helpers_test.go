// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/connector/xconnector"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/connector/cputimeconnector/internal/metadata"
)

// t0 is the tests' wall-clock origin.
var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// profBuilder builds messages shaped like the OTel eBPF profiler's after
// ctx_enrich: sample type samples/count, period type cpu/nanoseconds, period
// 1e9/hz, one timestamp per sample, thread.id/thread.name attributes, and
// the joined span as a link with the record's attributes.
type profBuilder struct {
	pd    pprofile.Profiles
	strs  map[string]int32
	attrs map[string]int32
	links map[[24]byte]int32
	funcs map[string]int32 // leaf function name → stack index
}

func newProfBuilder() *profBuilder {
	b := &profBuilder{pd: pprofile.NewProfiles(), strs: map[string]int32{}, attrs: map[string]int32{}, links: map[[24]byte]int32{}, funcs: map[string]int32{}}
	d := b.pd.Dictionary()
	b.str("")
	d.AttributeTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	d.MappingTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	return b
}

func (b *profBuilder) str(s string) int32 {
	if i, ok := b.strs[s]; ok {
		return i
	}
	st := b.pd.Dictionary().StringTable()
	st.Append(s)
	b.strs[s] = int32(st.Len() - 1)
	return b.strs[s]
}

// attr returns the index of the attribute k=v (string or int64).
func (b *profBuilder) attr(k string, v any) int32 {
	id := k + "\x00" + pcommon.NewValueEmpty().AsString()
	switch x := v.(type) {
	case string:
		id = k + "\x00s" + x
	case int64:
		id = k + "\x00i" + time.Duration(x).String()
	}
	if i, ok := b.attrs[id]; ok {
		return i
	}
	t := b.pd.Dictionary().AttributeTable()
	a := t.AppendEmpty()
	a.SetKeyStrindex(b.str(k))
	switch x := v.(type) {
	case string:
		a.Value().SetStr(x)
	case int64:
		a.Value().SetInt(x)
	}
	b.attrs[id] = int32(t.Len() - 1)
	return b.attrs[id]
}

// link returns the index of the link (trace, span) built from two numbers.
func (b *profBuilder) link(trace, span uint64) int32 {
	var k [24]byte
	tr, sp := traceID(trace), spanID(span)
	copy(k[:16], tr[:])
	copy(k[16:], sp[:])
	if i, ok := b.links[k]; ok {
		return i
	}
	t := b.pd.Dictionary().LinkTable()
	l := t.AppendEmpty()
	l.SetTraceID(tr)
	l.SetSpanID(sp)
	b.links[k] = int32(t.Len() - 1)
	return b.links[k]
}

func traceID(n uint64) (id pcommon.TraceID) {
	id[0] = 0x7e
	for i := range 8 {
		id[15-i] = byte(n >> (8 * i))
	}
	return id
}

func spanID(n uint64) (id pcommon.SpanID) {
	for i := range 8 {
		id[7-i] = byte(n >> (8 * i))
	}
	id[0] |= 0x50
	return id
}

// stack returns the index of a one-frame stack whose leaf is fn.
func (b *profBuilder) stack(fn string) int32 {
	if i, ok := b.funcs[fn]; ok {
		return i
	}
	d := b.pd.Dictionary()
	f := d.FunctionTable().AppendEmpty()
	f.SetNameStrindex(b.str(fn))
	loc := d.LocationTable().AppendEmpty()
	loc.Lines().AppendEmpty().SetFunctionIndex(int32(d.FunctionTable().Len() - 1))
	st := d.StackTable().AppendEmpty()
	st.LocationIndices().Append(int32(d.LocationTable().Len() - 1))
	b.funcs[fn] = int32(d.StackTable().Len() - 1)
	return b.funcs[fn]
}

// profile adds a ResourceProfiles with res and one profile sampling at hz.
func (b *profBuilder) profile(res map[string]any, hz int) pprofile.Profile {
	rp := b.pd.ResourceProfiles().AppendEmpty()
	if err := rp.Resource().Attributes().FromRaw(res); err != nil {
		panic(err)
	}
	p := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	p.SampleType().SetTypeStrindex(b.str("samples"))
	p.SampleType().SetUnitStrindex(b.str("count"))
	p.PeriodType().SetTypeStrindex(b.str("cpu"))
	p.PeriodType().SetUnitStrindex(b.str("nanoseconds"))
	p.SetPeriod(int64(time.Second) / int64(hz))
	p.SetTime(pcommon.NewTimestampFromTime(t0))
	return p
}

// sample adds a sample at each of times with link (0: none), stack and
// attribute indices.
func (b *profBuilder) sample(p pprofile.Profile, link, stack int32, times []time.Time, attrs ...int32) pprofile.Sample {
	s := p.Samples().AppendEmpty()
	s.SetLinkIndex(link)
	s.SetStackIndex(stack)
	s.AttributeIndices().Append(attrs...)
	for _, at := range times {
		s.TimestampsUnixNano().Append(uint64(at.UnixNano()))
	}
	return s
}

// newMetrics creates the profiles → metrics output of cfg, not started,
// with a clock the test sets.
func newMetrics(t testing.TB, cfg *Config, sink *consumertest.MetricsSink) (*cpuConnector, *time.Time) {
	t.Helper()
	c, err := NewFactory().CreateProfilesToMetrics(context.Background(), connectortest.NewNopSettings(metadata.Type), cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	cc := c.(*cpuConnector)
	now := t0
	cc.now = func() time.Time { return now }
	cc.metrics().intervalStart = now
	return cc, &now
}

func newLogs(t testing.TB, cfg *Config, sink *consumertest.LogsSink) *cpuConnector {
	t.Helper()
	c, err := NewFactory().CreateProfilesToLogs(context.Background(), connectortest.NewNopSettings(metadata.Type), cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*cpuConnector)
}

// metrics and logs are the aggregators of the outputs newMetrics and
// newLogs create.
func (c *cpuConnector) metrics() *metricsAgg { return c.agg.(*metricsAgg) }
func (c *cpuConnector) logs() *spanAgg       { return c.agg.(*spanAgg) }

func defaultConfig() *Config { return createDefaultConfig().(*Config) }

// ticks returns n sample times 1/hz apart from at.
func ticks(at time.Time, n, hz int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = at.Add(time.Duration(i) * time.Second / time.Duration(hz))
	}
	return out
}

var _ xconnector.Profiles = (*cpuConnector)(nil)

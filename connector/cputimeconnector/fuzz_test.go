// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// FuzzConsume: any OTLP profiles message a sender can produce is read by
// both outputs and flushed without a panic, and the held state stays
// within the limits. Seeds: testdata/fuzz/FuzzConsume (a well-formed
// message, one with indices outside every table, an off-CPU profile) and
// the messages below.
func FuzzConsume(f *testing.F) {
	var m pprofile.ProtoMarshaler
	for _, pd := range []pprofile.Profiles{demoMessage().pd, hostileSeed()} {
		b, err := m.MarshalProfiles(pd)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	cfg := defaultConfig()
	cfg.AggregationCardinalityLimit = 8
	cfg.SpanRecords.MaxPerInterval = 8
	f.Fuzz(func(t *testing.T, b []byte) {
		var u pprofile.ProtoUnmarshaler
		pd, err := u.UnmarshalProfiles(b)
		if err != nil {
			return
		}
		mc, _ := newMetrics(t, cfg, new(consumertest.MetricsSink))
		lc := newLogs(t, cfg, new(consumertest.LogsSink))
		for _, c := range []*cpuConnector{mc, lc} {
			if err := c.ConsumeProfiles(context.Background(), pd); err != nil {
				t.Fatal(err)
			}
		}
		if n := mc.metrics().seriesCount(); n > cfg.AggregationCardinalityLimit {
			t.Fatalf("%d series past the limit", n)
		}
		if n := len(lc.logs().spans); n > cfg.SpanRecords.MaxPerInterval {
			t.Fatalf("%d span records past the cap", n)
		}
		mc.now = func() time.Time { return t0.Add(time.Minute) }
		mc.flush(context.Background())
		lc.flush(context.Background())
	})
}

// hostileSeed: indices past every table, negative values, a huge period.
func hostileSeed() pprofile.Profiles {
	b := newProfBuilder()
	p := b.profile(map[string]any{"service.name": "x"}, 1)
	p.SetPeriod(1 << 62)
	b.sample(p, 1<<20, 1<<20, ticks(t0, 1, hz), 1<<20)
	b.sample(p, -1, -1, ticks(t0, 1, hz), -1)
	b.sample(p, 0, 0, ticks(t0, 1000, hz)).Values().Append(1<<62, 1<<62)
	s := b.sample(p, b.link(1, 1), b.stack("f"), nil)
	s.Values().Append(-5)
	return b.pd
}

// SPDX-License-Identifier: Apache-2.0

package processctxtel

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestLabelled: a Counter and a Gauge record each value under its own
// attribute, known in advance or not, from several goroutines at once
// (run with -race).
func TestLabelled(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	tb, err := NewTelemetryBuilder(tel.NewTelemetrySettings())
	if err != nil {
		t.Fatal(err)
	}
	c := NewCounter(tb.ProcessctxThreadReadFailures, "reason", "known")
	g := NewGauge(tb.ProcessctxCatalogUsed, "kind", "threads")
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				c.Add(ctx, "known", 1)
				c.Add(ctx, "added", 2)
			}
		}()
	}
	wg.Wait()
	g.Record(ctx, "threads", 7)
	g.Record(ctx, "runs", 9)

	m, err := tel.GetMetric("otelcol_processctx_thread_read_failures")
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		v, _ := dp.Attributes.Value(attribute.Key("reason"))
		sums[v.AsString()] += dp.Value
	}
	if len(sums) != 2 || sums["known"] != 400 || sums["added"] != 800 {
		t.Errorf("counts by reason %v, want known 400, added 800", sums)
	}
	m, err = tel.GetMetric("otelcol_processctx_catalog_used")
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int64{}
	for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
		v, _ := dp.Attributes.Value(attribute.Key("kind"))
		last[v.AsString()] = dp.Value
	}
	if len(last) != 2 || last["threads"] != 7 || last["runs"] != 9 {
		t.Errorf("gauge by kind %v, want threads 7, runs 9", last)
	}
}

// TestLabelledCacheBounded: values beyond the known ones are remembered up
// to a bound, and recorded rightly beyond it.
func TestLabelledCacheBounded(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	tb, err := NewTelemetryBuilder(tel.NewTelemetrySettings())
	if err != nil {
		t.Fatal(err)
	}
	c := NewCounter(tb.ProcessctxThreadReadFailures, "reason")
	for i := range 10 * maxAddedValues {
		c.Add(context.Background(), fmt.Sprintf("v%d", i), 1)
	}
	if n := len(c.sets.added); n != maxAddedValues {
		t.Fatalf("%d values remembered, want %d", n, maxAddedValues)
	}
	m, err := tel.GetMetric("otelcol_processctx_thread_read_failures")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.Data.(metricdata.Sum[int64]).DataPoints); n != 10*maxAddedValues {
		t.Fatalf("%d series, want %d", n, 10*maxAddedValues)
	}
}

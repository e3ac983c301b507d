// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ctxenrichprocessor

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
	"github.com/otelctx/otelctx/internal/watcher"
	"github.com/otelctx/otelctx/processor/ctxenrichprocessor/internal/metadata"
)

func pcommonTime(t time.Time) pcommon.Timestamp { return pcommon.NewTimestampFromTime(t) }

var idSeq atomic.Int64

// testHost is the host the tests start processors on: its extensions are
// the watchers testCatalog made, each under its own ID.
var testHost = watchertest.NewHost()

// testCatalog is the empty catalog of a watcher (never started: the tests
// fill the catalog) that testHost has as a fresh process_ctx extension.
func testCatalog(t testing.TB) (component.ID, *catalog.Catalog) {
	t.Helper()
	id := component.MustNewIDWithName("process_ctx", fmt.Sprintf("test%d", idSeq.Add(1)))
	w, err := watcher.New(watcher.Settings{}, *watcher.NewDefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	testHost.Add(id, w)
	return id, w.Catalog()
}

// harness is a ctx_enrich profiles processor over a test catalog, with its
// metrics readable.
type harness struct {
	t       testing.TB
	proc    interface{ Shutdown(context.Context) error }
	sink    *consumertest.ProfilesSink
	reader  *sdkmetric.ManualReader
	consume func(pprofile.Profiles) error
}

func newHarness(t testing.TB, cfg *Config) *harness {
	t.Helper()
	h := &harness{t: t, sink: new(consumertest.ProfilesSink), reader: sdkmetric.NewManualReader()}
	set := processortest.NewNopSettings(metadata.Type)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	set.MeterProvider = mp
	p, err := NewFactory().CreateProfiles(context.Background(), set, cfg, h.sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), testHost); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	h.proc = p
	h.consume = func(pd pprofile.Profiles) error { return p.ConsumeProfiles(context.Background(), pd) }
	return h
}

func testConfig(id component.ID) *Config {
	cfg := createDefaultConfig().(*Config)
	cfg.Extension = id
	return cfg
}

// run processes in and returns the output.
func (h *harness) run(in pprofile.Profiles) pprofile.Profiles {
	h.t.Helper()
	h.sink.Reset()
	if err := h.consume(in); err != nil {
		h.t.Fatal(err)
	}
	all := h.sink.AllProfiles()
	if len(all) != 1 {
		h.t.Fatalf("%d messages out", len(all))
	}
	return all[0]
}

// counter returns the sum of a counter's points whose attribute attr (if
// not empty) has value val.
func (h *harness) counter(name, attr, val string) int64 {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if attr == "" {
					n += dp.Value
				} else if v, ok := dp.Attributes.Value(attribute.Key(attr)); ok && v.AsString() == val {
					n += dp.Value
				}
			}
		}
	}
	return n
}

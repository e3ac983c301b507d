package ctxenrichprocessor

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/otelctx/otelctx/processor/ctxenrichprocessor/internal/metadata"
	"github.com/otelctx/otelctx/receiver/processctxreceiver"
)

// TestStartWithoutReceiver: Start names the missing receiver and says
// what to do.
func TestStartWithoutReceiver(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.Receiver = component.MustNewIDWithName("processctx", "x")
	p, err := NewFactory().CreateProfiles(context.Background(), processortest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	err = p.Start(context.Background(), componenttest.NewNopHost())
	if err == nil || !strings.Contains(err.Error(), `ctxenrich: no processctx receiver "processctx/x" in this collector: add it to a pipeline`) {
		t.Fatalf("Start: %v", err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestWithRealReceiver: the processctx receiver, created as the collector
// creates it (before anything starts), is what Start finds; its shutdown
// unregisters the catalog.
func TestWithRealReceiver(t *testing.T) {
	rf := processctxreceiver.NewFactory()
	rset := receivertest.NewNopSettings(rf.Type())
	rset.ID = component.MustNewIDWithName("processctx", "lifecycle")
	r, err := rf.CreateLogs(context.Background(), rset, rf.CreateDefaultConfig(), consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(rset.ID)
	p, err := NewFactory().CreateProfiles(context.Background(), processortest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatalf("Start with the receiver created: %v", err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	p2, _ := NewFactory().CreateProfiles(context.Background(), processortest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	if err := p2.Start(context.Background(), componenttest.NewNopHost()); err == nil {
		t.Error("Start found the catalog of a receiver that shut down")
	}
	_ = p2.Shutdown(context.Background())
}

// TestResourceSignals: logs, metrics and traces resources with process.pid
// get the published attributes by the same policy; other resources pass.
func TestResourceSignals(t *testing.T) {
	id, c := testCatalog(t)
	addCheckout(c, 100, t0)
	cfg := testConfig(id)
	set := processortest.NewNopSettings(metadata.Type)
	ctx := context.Background()
	host := componenttest.NewNopHost()
	check := func(what string, res map[string]any, joined bool) {
		t.Helper()
		if joined {
			if res["service.name"] != "checkout" || res["host.name"] != "own-host" || res["team"] != "payments" {
				t.Errorf("%s: %v", what, res)
			}
		} else if _, ok := res["team"]; ok {
			t.Errorf("%s joined: %v", what, res)
		}
	}

	ls := new(consumertest.LogsSink)
	lp, err := NewFactory().CreateLogs(ctx, set, cfg, ls)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.Start(ctx, host); err != nil {
		t.Fatal(err)
	}
	ld := plog.NewLogs()
	for _, pid := range []any{int64(100), "100", int64(300)} {
		rl := ld.ResourceLogs().AppendEmpty()
		_ = rl.Resource().Attributes().FromRaw(map[string]any{"process.pid": pid, "host.name": "own-host", "service.name": "x"})
		rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().SetTimestamp(pcommonTime(t0.Add(time.Second)))
	}
	// A record from before the process existed: a previous holder of PID 100.
	old := ld.ResourceLogs().AppendEmpty()
	_ = old.Resource().Attributes().FromRaw(map[string]any{"process.pid": int64(100)})
	old.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().SetTimestamp(pcommonTime(t0.Add(-time.Minute)))
	if err := lp.ConsumeLogs(ctx, ld); err != nil {
		t.Fatal(err)
	}
	out := ls.AllLogs()[0].ResourceLogs()
	check("logs int pid", out.At(0).Resource().Attributes().AsRaw(), true)
	check("logs string pid", out.At(1).Resource().Attributes().AsRaw(), true)
	check("logs unknown pid", out.At(2).Resource().Attributes().AsRaw(), false)
	check("logs before creation", out.At(3).Resource().Attributes().AsRaw(), false)
	_ = lp.Shutdown(ctx)

	ms := new(consumertest.MetricsSink)
	mp, err := NewFactory().CreateMetrics(ctx, set, cfg, ms)
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.Start(ctx, host); err != nil {
		t.Fatal(err)
	}
	md := pmetric.NewMetrics()
	_ = md.ResourceMetrics().AppendEmpty().Resource().Attributes().FromRaw(map[string]any{"process.pid": int64(100), "host.name": "own-host"})
	md.ResourceMetrics().AppendEmpty()
	if err := mp.ConsumeMetrics(ctx, md); err != nil {
		t.Fatal(err)
	}
	check("metrics", ms.AllMetrics()[0].ResourceMetrics().At(0).Resource().Attributes().AsRaw(), true)
	check("metrics without pid", ms.AllMetrics()[0].ResourceMetrics().At(1).Resource().Attributes().AsRaw(), false)
	_ = mp.Shutdown(ctx)

	ts := new(consumertest.TracesSink)
	tp, err := NewFactory().CreateTraces(ctx, set, cfg, ts)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(ctx, host); err != nil {
		t.Fatal(err)
	}
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	_ = rs.Resource().Attributes().FromRaw(map[string]any{"process.pid": int64(100), "host.name": "own-host"})
	rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetStartTimestamp(pcommonTime(t0.Add(time.Second)))
	if err := tp.ConsumeTraces(ctx, td); err != nil {
		t.Fatal(err)
	}
	check("traces", ts.AllTraces()[0].ResourceSpans().At(0).Resource().Attributes().AsRaw(), true)
	_ = tp.Shutdown(ctx)
}

// TestFactory: type, signals and stability as metadata.yaml says.
func TestFactory(t *testing.T) {
	f := NewFactory()
	if f.Type() != metadata.Type || f.ProfilesStability() != component.StabilityLevelDevelopment ||
		f.LogsStability() != component.StabilityLevelDevelopment || f.TracesStability() != component.StabilityLevelDevelopment ||
		f.MetricsStability() != component.StabilityLevelDevelopment {
		t.Errorf("factory %v", f.Type())
	}
}

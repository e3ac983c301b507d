// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ctxenrichprocessor

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/testutil/profiletest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
	"github.com/otelctx/otelctx/processor/ctxenrichprocessor/internal/metadata"
)

// TestStartWithoutExtension: Start names the missing extension and says
// what to do.
func TestStartWithoutExtension(t *testing.T) {
	t.Parallel()
	cfg := createDefaultConfig().(*Config)
	cfg.Extension = component.MustNewIDWithName("process_ctx", "x")
	p, err := NewFactory().CreateProfiles(context.Background(), processortest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	err = p.Start(context.Background(), testHost)
	if err == nil || !strings.Contains(err.Error(),
		"ctx_enrich: no extension \"process_ctx/x\" in this collector: add `process_ctx/x: {}` under extensions: and list it in service.extensions") {
		t.Fatalf("Start: %v", err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestWithExtensionOnly: the process_ctx extension, created and started as
// the collector does, with no process_ctx receiver anywhere, is what the
// processor reads: a real publisher's attributes reach a log resource
// with its PID.
func TestWithExtensionOnly(t *testing.T) {
	t.Parallel()
	pub := testpub.Start(t, testpub.Glibc)
	pub.Set("service.name", "ext-only", "service.instance.id", "i-1")
	pub.Publish()

	p, ls := startWithExtension(t, pub.PID)
	joinedResource(t, p, ls, pub.PID, "the publisher's attributes", func(res map[string]any) bool {
		return res["service.name"] == "ext-only" && res["service.instance.id"] == "i-1"
	})
}

// startWithExtension starts a process_ctx extension watching pid, created
// and started as the collector does, and a logs ctx_enrich reading it.
func startWithExtension(t *testing.T, pid int) (processor.Logs, *consumertest.LogsSink) {
	t.Helper()
	ef := processctxextension.NewFactory()
	ecfg := ef.CreateDefaultConfig().(*processctxextension.Config)
	ecfg.CollectionInterval, ecfg.DiscoveryInterval, ecfg.RecheckInterval = 20*time.Millisecond, 20*time.Millisecond, 20*time.Millisecond
	ecfg.Include.PIDs = []int{pid}
	ecfg.ThreadSampler = processctxextension.ThreadSamplerOff
	eset := extensiontest.NewNopSettings(ef.Type())
	eset.ID = component.MustNewIDWithName("process_ctx", "only")
	ext, err := ef.Create(context.Background(), eset, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ext.Shutdown(context.Background()) })
	host := watchertest.NewHost().AddComponent(eset.ID, ext)

	cfg := testConfig(eset.ID)
	ls := new(consumertest.LogsSink)
	p, err := NewFactory().CreateLogs(context.Background(), processortest.NewNopSettings(metadata.Type), cfg, ls)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), host); err != nil {
		t.Fatalf("Start with the extension only: %v", err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p, ls
}

// joinedResource sends logs of pid through p until their resource, as p
// passes it on, satisfies ok.
func joinedResource(t *testing.T, p processor.Logs, ls *consumertest.LogsSink, pid int, what string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	var res map[string]any
	testenv.Eventually(t, what+" on the resource", func() bool {
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutInt("process.pid", int64(pid))
		rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().SetTimestamp(pcommonTime(time.Now()))
		if err := p.ConsumeLogs(context.Background(), ld); err != nil {
			t.Fatal(err)
		}
		all := ls.AllLogs()
		res = all[len(all)-1].ResourceLogs().At(0).Resource().Attributes().AsRaw()
		return ok(res)
	})
	return res
}

// TestResourceSignals: logs, metrics and traces resources with process.pid
// get the published attributes by the same policy; other resources pass.
func TestResourceSignals(t *testing.T) {
	id, c := testCatalog(t)
	profiletest.AddCheckout(c, 100, profiletest.T0)
	cfg := testConfig(id)
	set := processortest.NewNopSettings(metadata.Type)
	ctx := context.Background()
	host := testHost
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
		rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().SetTimestamp(pcommonTime(profiletest.T0.Add(time.Second)))
	}
	// A record from before the process existed: a previous holder of PID 100.
	old := ld.ResourceLogs().AppendEmpty()
	_ = old.Resource().Attributes().FromRaw(map[string]any{"process.pid": int64(100)})
	old.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().SetTimestamp(pcommonTime(profiletest.T0.Add(-time.Minute)))
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
	rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetStartTimestamp(pcommonTime(profiletest.T0.Add(time.Second)))
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

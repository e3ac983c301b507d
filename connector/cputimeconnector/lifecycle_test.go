// SPDX-License-Identifier: Apache-2.0

//go:build linux

package cputimeconnector

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/connector/xconnector"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/otelctx/otelctx/connector/cputimeconnector/internal/metadata"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestLifecycle: both outputs start, consume, and on Shutdown stop their
// flush goroutine (goleak, TestMain) and send what the interval holds;
// Shutdown without Start releases nothing and sends nothing.
func TestLifecycle(t *testing.T) {
	f := NewFactory()
	if f.Type() != metadata.Type || f.ProfilesToMetricsStability() != metadata.ProfilesToMetricsStability ||
		f.ProfilesToLogsStability() != metadata.ProfilesToLogsStability {
		t.Fatal("factory type or stability differ from metadata")
	}
	ctx := context.Background()
	cfg := f.CreateDefaultConfig()
	set := connectortest.NewNopSettings(metadata.Type)
	ms, ls := new(consumertest.MetricsSink), new(consumertest.LogsSink)
	m, err := f.CreateProfilesToMetrics(ctx, set, cfg, ms)
	if err != nil {
		t.Fatal(err)
	}
	l, err := f.CreateProfilesToLogs(ctx, set, cfg, ls)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []xconnector.Profiles{m, l} {
		if c.Capabilities().MutatesData {
			t.Error("the connector does not mutate profiles")
		}
		if err := c.Start(ctx, componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
		if err := c.ConsumeProfiles(ctx, demoMessage().pd); err != nil {
			t.Fatal(err)
		}
		if err := c.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(ms.AllMetrics()) != 1 || len(ls.AllLogs()) != 1 {
		t.Errorf("shutdown flushed %d metrics and %d logs messages, want 1 each", len(ms.AllMetrics()), len(ls.AllLogs()))
	}

	// Never started.
	m2, err := f.CreateProfilesToMetrics(ctx, set, cfg, ms)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ms.AllMetrics()) != 1 {
		t.Error("a connector never started sent data on Shutdown")
	}
}

// TestFlushesOnInterval: the flush goroutine sends at
// metrics_flush_interval without Shutdown.
func TestFlushesOnInterval(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.MetricsFlushInterval = minFlushInterval
	ms := new(consumertest.MetricsSink)
	ctx := context.Background()
	m, err := NewFactory().CreateProfilesToMetrics(ctx, connectortest.NewNopSettings(metadata.Type), cfg, ms)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Shutdown(ctx) }()
	if err := m.ConsumeProfiles(ctx, demoMessage().pd); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "a flush", func() bool { return len(ms.AllMetrics()) > 0 })
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

func ebpfConfig(pids ...int) *Config {
	cfg := fastConfig(pids...)
	cfg.ThreadSampler = ThreadSamplerEBPF
	return cfg
}

// A publication is seen through the prctl hook, not at the next poll (an
// hour away here, far beyond eventually's timeout): a new context and an
// update. The latency is logged, not asserted.
func TestThreadSamplerPrctlRescan(t *testing.T) {
	samplertest.Require(t)
	pub := testpub.Start(t, testpub.Glibc) // not published yet
	cfg := ebpfConfig(pub.PID)
	cfg.CollectionInterval, cfg.DiscoveryInterval, cfg.RecheckInterval = time.Hour, time.Hour, time.Hour
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	rec, _, cat := startWatcher(t, cfg, tel)
	eventually(t, "the first discovery round", func() bool {
		return telemetrytest.Sum(tel, "otelcol_processctx_processes_scanned", "reason", "") > 0
	})
	if _, ok := cat.Process(pub.PID); ok {
		t.Fatal("published before publishing")
	}

	pub.Set("service.name", "checkout")
	start := time.Now()
	pub.Publish() // returns once the publisher has published (and called prctl)
	eventually(t, "the new context in the catalog", func() bool { _, ok := cat.Process(pub.PID); return ok })
	found := time.Since(start)
	eventually(t, "the Found event", func() bool { return len(rec.of(pub.PID, publisher.Found)) > 0 })
	event := time.Since(start)

	pub.Set("service.version", "2")
	start = time.Now()
	pub.Publish()
	eventually(t, "the updated context in the catalog", func() bool {
		p, ok := cat.Process(pub.PID)
		if !ok {
			return false
		}
		v, ok := processctx.Lookup(p.Context.Resource.Attributes, "service.version")
		return ok && v.Str == "2"
	})
	updated := time.Since(start)
	t.Logf("publication → catalog: new context %v (entity event %v), update %v; the poll interval is 1h", found, event, updated)
	if telemetrytest.Sum(tel, "otelcol_processctx_prctl_rescans", "reason", "") < 2 {
		t.Errorf("prctl rescans counted: %d", telemetrytest.Sum(tel, "otelcol_processctx_prctl_rescans", "reason", ""))
	}
}

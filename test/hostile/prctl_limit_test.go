// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
)

// TestPrctlStormLimited: publisher A calls prctl(PR_SET_VMA_ANON_NAME,
// "OTEL_CTX") in a loop; publisher B starts during the storm and names its
// mapping once. Discovery rounds are an hour apart, so B is found only
// through its prctl event: the kernel must send it, the storm's events
// being limited per process rather than filling the ring buffer (without
// the limit B's event is dropped and B waits for the next round).
func TestPrctlStormLimited(t *testing.T) {
	samplertest.Require(t)
	a := startHostile(t)
	cfg := config(processctxextension.ThreadSamplerEBPF)
	cfg.Include.Executables = []string{filepath.Base(buildHostile(t))}
	cfg.DiscoveryInterval = time.Hour
	cfg.RecheckInterval = time.Hour
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	ext, wt := startExtension(t, cfg, tel)
	t.Cleanup(func() {
		if err := ext.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	cat := wt.Catalog()
	eventually(t, "A in the catalog (the first discovery round)", func() bool {
		_, ok := cat.Process(a.PID)
		return ok
	})

	a.Do("storm")
	limited := func() int64 { return telemetrytest.Sum(tel, "otelcol_processctx_prctl_events_limited", "", "") }
	dropped := func() int64 { return telemetrytest.Sum(tel, "otelcol_processctx_prctl_events_dropped", "", "") }
	// Thousands of A's events: the ring buffer (about 2,700) would be full.
	eventually(t, "A's storm under way", func() bool { return limited()+dropped() > 10000 })

	b := startHostile(t)
	eventually(t, "B in the catalog through its prctl event", func() bool {
		_, ok := cat.Process(b.PID)
		return ok
	})
	if limited() == 0 {
		t.Errorf("prctl_events_limited = 0 during A's storm")
	}
	t.Logf("prctl_events_limited %d, prctl_events_dropped %d, prctl_rescans %d", limited(), dropped(),
		telemetrytest.Sum(tel, "otelcol_processctx_prctl_rescans", "", ""))
}

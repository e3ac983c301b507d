// Package ebpfreceiver starts, for an end-to-end test, a processctx
// receiver in the test's process that watches one process with the eBPF
// thread sampler, and hands back its catalog.
package ebpfreceiver

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/receiver/processctxreceiver"
)

// Start starts the receiver on pid with the sampler at hz, looking at the
// process every 20 ms, and shuts it down when the test ends. It returns the
// receiver's ID (a ctxenrich processor names it) and its catalog.
func Start(t *testing.T, pid, hz int) (component.ID, *catalog.Catalog) {
	t.Helper()
	return StartWith(t, pid, func(cfg *processctxreceiver.Config) {
		cfg.ThreadSampler = processctxreceiver.ThreadSamplerEBPF
		cfg.ThreadContext.FrequencyHz = hz
	})
}

// StartWith is Start with the receiver's default thread sampling, changed
// by configure.
func StartWith(t *testing.T, pid int, configure func(*processctxreceiver.Config)) (component.ID, *catalog.Catalog) {
	t.Helper()
	f := processctxreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*processctxreceiver.Config)
	cfg.CollectionInterval, cfg.DiscoveryInterval, cfg.RecheckInterval = 20*time.Millisecond, 20*time.Millisecond, 20*time.Millisecond
	cfg.Include.PIDs = []int{pid}
	configure(cfg)
	set := receivertest.NewNopSettings(f.Type())
	rcv, err := f.CreateLogs(context.Background(), set, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rcv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	cat, ok := catalog.Find(set.ID)
	if !ok {
		t.Fatalf("no catalog registered for %v", set.ID)
	}
	return set.ID, cat
}

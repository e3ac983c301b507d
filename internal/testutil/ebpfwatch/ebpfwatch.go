// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package ebpfwatch starts, for an end-to-end test, a process_ctx
// extension in the test's process that watches one process with the eBPF
// thread sampler, and hands back its catalog.
package ebpfwatch

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
	"github.com/otelctx/otelctx/internal/watcher"
)

// Host holds the extensions Start made, each under its own ID: a ctx_enrich
// processor started on it finds the one its extension: names.
var Host = watchertest.NewHost()

var seq atomic.Int64

// Start starts the extension on pid with the sampler at hz, looking at the
// process every 20 ms, and shuts it down when the test ends. It returns the
// extension's ID (a ctx_enrich processor names it) and its catalog.
func Start(t *testing.T, pid, hz int) (component.ID, *catalog.Catalog) {
	t.Helper()
	return StartWith(t, pid, func(cfg *processctxextension.Config) {
		cfg.ThreadSampler = processctxextension.ThreadSamplerEBPF
		cfg.ThreadContext.FrequencyHz = hz
	})
}

// StartWith is Start with the extension's default thread sampling, changed
// by configure.
func StartWith(t *testing.T, pid int, configure func(*processctxextension.Config)) (component.ID, *catalog.Catalog) {
	t.Helper()
	f := processctxextension.NewFactory()
	cfg := f.CreateDefaultConfig().(*processctxextension.Config)
	cfg.CollectionInterval, cfg.DiscoveryInterval, cfg.RecheckInterval = 20*time.Millisecond, 20*time.Millisecond, 20*time.Millisecond
	cfg.Include.PIDs = []int{pid}
	configure(cfg)
	set := extensiontest.NewNopSettings(f.Type())
	set.ID = component.MustNewIDWithName(f.Type().String(), fmt.Sprintf("e2e%d", seq.Add(1)))
	ext, err := f.Create(context.Background(), set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ext.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	Host.AddComponent(set.ID, ext)
	return set.ID, ext.(watcher.Provider).Watcher().Catalog()
}

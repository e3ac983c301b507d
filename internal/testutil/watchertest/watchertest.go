// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package watchertest gives tests a collector host whose extensions are
// process_ctx watchers, as the process_ctx extension provides them.
package watchertest

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"

	"github.com/otelctx/otelctx/internal/watcher"
)

// Host is a component.Host with watchers as extensions; safe for
// concurrent use.
type Host struct {
	mu   sync.Mutex
	exts map[component.ID]component.Component
}

// NewHost is an empty host.
func NewHost() *Host { return &Host{exts: map[component.ID]component.Component{}} }

// Add makes w the extension id and returns h.
func (h *Host) Add(id component.ID, w *watcher.Watcher) *Host {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.exts[id] = provider{w}
	return h
}

// AddComponent makes c (not necessarily a process_ctx extension) the
// extension id and returns h.
func (h *Host) AddComponent(id component.ID, c component.Component) *Host {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.exts[id] = c
	return h
}

// GetExtensions implements component.Host.
func (h *Host) GetExtensions() map[component.ID]component.Component {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.exts)
}

type provider struct{ w *watcher.Watcher }

func (provider) Start(context.Context, component.Host) error { return nil }
func (provider) Shutdown(context.Context) error              { return nil }
func (p provider) Watcher() *watcher.Watcher                 { return p.w }

// Start makes and starts a watcher with cfg, shut down when the test ends.
func Start(t testing.TB, set watcher.Settings, cfg *watcher.Config) *watcher.Watcher {
	t.Helper()
	w, err := watcher.New(set, *cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return w
}

// FastConfig is the default configuration with 20 ms intervals, watching
// only pids (the host's other processes stay out of the test) and with no
// thread sampling (auto would load the eBPF sampler, or ptrace the test's
// children, in every test); tests that want threads set ThreadSampler.
func FastConfig(pids ...int) *watcher.Config {
	cfg := watcher.NewDefaultConfig()
	cfg.CollectionInterval = 20 * time.Millisecond
	cfg.DiscoveryInterval = 20 * time.Millisecond
	cfg.RecheckInterval = 20 * time.Millisecond
	cfg.Include.PIDs = pids
	cfg.ThreadSampler = watcher.ThreadSamplerOff
	return cfg
}

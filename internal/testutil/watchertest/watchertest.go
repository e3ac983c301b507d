// Package watchertest gives tests a collector host whose extensions are
// processctx watchers, as the processctx extension provides them.
package watchertest

import (
	"context"
	"maps"
	"sync"
	"testing"

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

// AddComponent makes c (not necessarily a processctx extension) the
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

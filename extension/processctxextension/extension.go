// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxextension

import (
	"context"
	"errors"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"

	"github.com/otelctx/otelctx/extension/processctxextension/internal/metadata"
	"github.com/otelctx/otelctx/internal/watcher"
)

// processctxExtension is the collector's handle on one watcher; the
// components that name the extension reach the watcher through
// watcher.FromHost.
type processctxExtension struct {
	w       *watcher.Watcher
	tb      *metadata.TelemetryBuilder
	catalog catalogEndpoint
}

var (
	_ extension.Extension = (*processctxExtension)(nil)
	_ watcher.Provider    = (*processctxExtension)(nil)
)

// Start starts discovery, polling and the thread-context reader.
func (e *processctxExtension) Start(ctx context.Context, _ component.Host) error {
	if err := e.w.Start(ctx); err != nil {
		return err
	}
	return e.catalog.start(e.w)
}

// Shutdown stops them; it may be called without Start and more than once.
func (e *processctxExtension) Shutdown(ctx context.Context) error {
	e.tb.Shutdown()
	return errors.Join(e.catalog.stop(ctx), e.w.Shutdown(ctx))
}

// Watcher implements watcher.Provider.
func (e *processctxExtension) Watcher() *watcher.Watcher { return e.w }

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxextension

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/extension/processctxextension/internal/metadata"
	"github.com/otelctx/otelctx/internal/watcher"
)

// processctxExtension is the collector's handle on one watcher; the
// components that name the extension reach the watcher through
// watcher.FromHost.
type processctxExtension struct {
	w   *watcher.Watcher
	tb  *metadata.TelemetryBuilder
	log *zap.Logger
	// stopHealth ends the health check's goroutine; healthDone is closed
	// when it has.
	stopHealth context.CancelFunc
	healthDone chan struct{}
}

var (
	_ extension.Extension = (*processctxExtension)(nil)
	_ watcher.Provider    = (*processctxExtension)(nil)
)

// Start starts discovery, polling and the thread-context reader.
// and the stall check that reports the extension's health to host.
func (e *processctxExtension) Start(ctx context.Context, host component.Host) error {
	if err := e.w.Start(ctx); err != nil {
		return err
	}
	hctx, cancel := context.WithCancel(context.Background())
	e.stopHealth, e.healthDone = cancel, make(chan struct{})
	go watchHealth(hctx, e.log, host, e.w, e.w.Config().StallTimeout, e.healthDone)
	return nil
}

// Shutdown stops them; it may be called without Start and more than once.
func (e *processctxExtension) Shutdown(ctx context.Context) error {
	if e.stopHealth != nil {
		e.stopHealth()
		<-e.healthDone // it never waits on a read
		e.stopHealth = nil
	}
	e.tb.Shutdown()
	return e.w.Shutdown(ctx)
}

// Watcher implements watcher.Provider.
func (e *processctxExtension) Watcher() *watcher.Watcher { return e.w }

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package processctxextension runs, once per collector, what the process_ctx
// components share: discovery and polling of the processes that publish an
// OpenTelemetry process context (OTEP 4719), the thread-context readers
// (OTEP 4947 and DD_OTEL_CTX) and the catalog of what they read. The
// process_ctx receiver turns its rounds into entity events; the ctx_enrich
// processor joins its catalog onto telemetry. Both name it by ID.
package processctxextension

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/xextension"

	"github.com/otelctx/otelctx/extension/processctxextension/internal/metadata"
	"github.com/otelctx/otelctx/internal/watcher"
)

// NewFactory returns the process_ctx extension factory.
func NewFactory() extension.Factory {
	return xextension.NewFactory(metadata.Type, createDefaultConfig, create, metadata.ExtensionStability,
		xextension.WithDeprecatedTypeAlias(metadata.DeprecatedType))
}

func createDefaultConfig() component.Config { return watcher.NewDefaultConfig() }

func create(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	w, err := watcher.New(watcher.Settings{Logger: set.Logger, Telemetry: tb}, *cfg.(*Config))
	if err != nil {
		return nil, err
	}
	return &processctxExtension{w: w, tb: tb, log: set.Logger, catalog: catalogEndpoint{log: set.Logger}}, nil
}

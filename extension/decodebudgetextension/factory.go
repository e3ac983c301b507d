// SPDX-License-Identifier: Apache-2.0

// Package decodebudgetextension is a gRPC server middleware for the OTLP
// receiver: it bounds what the server decodes, before decoding (README.md).
package decodebudgetextension

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"

	"github.com/otelctx/otelctx/extension/decodebudgetextension/internal/metadata"
)

// NewFactory returns the decode_budget extension's factory.
func NewFactory() extension.Factory {
	return extension.NewFactory(metadata.Type, createDefaultConfig, create, metadata.ExtensionStability)
}

func createDefaultConfig() component.Config {
	return &Config{MaxDecodingBytes: DefaultMaxDecodingBytes, MaxElements: DefaultMaxElements}
}

func create(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	c := cfg.(*Config)
	return &decodeBudget{cfg: *c, telemetry: tb, logger: set.Logger, budget: newBudget(c.MaxDecodingBytes)}, nil
}

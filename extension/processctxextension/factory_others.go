// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package processctxextension

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension"

	"github.com/otelctx/otelctx/extension/processctxextension/internal/metadata"
	"github.com/otelctx/otelctx/internal/linuxonly"
)

// Config accepts the Linux configuration's keys and ignores them.
type Config = linuxonly.Config

// NewFactory returns the process_ctx extension factory: on this operating
// system the extension's Start fails (Linux only).
func NewFactory() extension.Factory {
	return extension.NewFactory(metadata.Type, createDefaultConfig, create, metadata.ExtensionStability)
}

func createDefaultConfig() component.Config { return &Config{} }

func create(context.Context, extension.Settings, component.Config) (extension.Extension, error) {
	return linuxonly.Component{Name: "process_ctx extension"}, nil
}

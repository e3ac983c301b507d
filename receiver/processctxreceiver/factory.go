// SPDX-License-Identifier: Apache-2.0

// Package processctxreceiver emits entity events, as logs, for the processes
// and services that the process_ctx extension finds publishing an
// OpenTelemetry process context (OTEP 4719), updates and loses.
package processctxreceiver

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/xreceiver"

	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

// NewFactory returns the process_ctx receiver factory.
func NewFactory() receiver.Factory {
	return xreceiver.NewFactory(metadata.Type, createDefaultConfig,
		xreceiver.WithLogs(createLogs, metadata.LogsStability),
		xreceiver.WithDeprecatedTypeAlias(metadata.DeprecatedType))
}

func createDefaultConfig() component.Config {
	return &Config{
		Extension:      component.MustNewID("process_ctx"),
		EntityInterval: 5 * time.Minute,
		EventFormat:    EventFormatLegacy,
	}
}

func createLogs(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Logs) (receiver.Logs, error) {
	return newReceiver(set, cfg.(*Config), next)
}

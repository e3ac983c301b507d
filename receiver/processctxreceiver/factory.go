// SPDX-License-Identifier: Apache-2.0

// Package processctxreceiver emits entity events, as logs, for the processes
// and services that the processctx extension finds publishing an
// OpenTelemetry process context (OTEP 4719), updates and loses.
package processctxreceiver

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"

	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

// NewFactory returns the processctx receiver factory.
func NewFactory() receiver.Factory {
	return receiver.NewFactory(metadata.Type, createDefaultConfig,
		receiver.WithLogs(createLogs, metadata.LogsStability))
}

func createDefaultConfig() component.Config {
	return &Config{
		Extension:      component.MustNewID("processctx"),
		EntityInterval: 5 * time.Minute,
		EventFormat:    EventFormatLegacy,
	}
}

func createLogs(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Logs) (receiver.Logs, error) {
	return newReceiver(set, cfg.(*Config), next)
}

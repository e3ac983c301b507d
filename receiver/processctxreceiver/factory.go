// Package processctxreceiver discovers the processes of the host that publish
// an OpenTelemetry process context (OTEP 4719) and emits entity events, as
// logs, for the processes and services it finds, updates and loses.
package processctxreceiver

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/scan/processctx"
	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

// NewFactory returns the processctx receiver factory.
func NewFactory() receiver.Factory {
	return receiver.NewFactory(metadata.Type, createDefaultConfig,
		receiver.WithLogs(createLogs, metadata.LogsStability))
}

func createDefaultConfig() component.Config {
	l := processctx.DefaultLimits()
	return &Config{
		CollectionInterval: 10 * time.Second,
		DiscoveryInterval:  30 * time.Second,
		EntityInterval:     5 * time.Minute,
		RecheckInterval:    time.Minute,
		ExitedRetention:    catalog.DefaultRetention,
		Limits: LimitsConfig{
			MaxPayloadSize:          l.MaxPayloadSize,
			MaxAttributes:           l.MaxAttributes,
			MaxAttributeValueLength: l.MaxValueLength,
			MaxProcesses:            4096,
			MaxRetainedProcesses:    catalog.DefaultMaxRetained,
		},
		ThreadSampler: ThreadSamplerAuto,
		ThreadContext: defaultThreadContextConfig(),
		DDOtelCtx:     defaultDDOtelCtxConfig(),
	}
}

func createLogs(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Logs) (receiver.Logs, error) {
	return newReceiver(set, cfg.(*Config), next)
}

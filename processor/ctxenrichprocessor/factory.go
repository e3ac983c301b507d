// SPDX-License-Identifier: Apache-2.0

// Package ctxenrichprocessor joins telemetry with the process and thread
// contexts the process_ctx extension of the same collector has read: resources
// get the attributes their process publishes (OTEP 4719), and profile
// samples the span their thread was in when sampled (OTEP 4947).
package ctxenrichprocessor

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"
	"go.opentelemetry.io/collector/processor/processorhelper/xprocessorhelper"
	"go.opentelemetry.io/collector/processor/xprocessor"

	"github.com/otelctx/otelctx/processor/ctxenrichprocessor/internal/metadata"
)

// DefaultMatchWindow is the default match_window. A profiler's own
// timestamp of a sample was seen tens of µs (at most 113 µs) after our
// capture in the same interrupt; 500 µs leaves room for clock conversions
// and stays under half the period of a profiler sampling at up to ~1 kHz,
// so a neighbouring sample's observation cannot speak for this one.
const DefaultMatchWindow = 500 * time.Microsecond

// NewFactory returns the ctx_enrich processor factory.
func NewFactory() xprocessor.Factory {
	return xprocessor.NewFactory(metadata.Type, createDefaultConfig,
		xprocessor.WithProfiles(createProfiles, metadata.ProfilesStability),
		xprocessor.WithLogs(createLogs, metadata.LogsStability),
		xprocessor.WithMetrics(createMetrics, metadata.MetricsStability),
		xprocessor.WithTraces(createTraces, metadata.TracesStability),
		xprocessor.WithDeprecatedTypeAlias(metadata.DeprecatedType))
}

func createDefaultConfig() component.Config {
	return &Config{
		Extension: component.MustNewID("process_ctx"),
		ResourceMerge: ResourceMergeConfig{
			PublishedWins: []string{"service.", "deployment.", "telemetry.sdk."},
			OtherKeys:     OtherKeysInsert,
		},
		MatchWindow: DefaultMatchWindow,
	}
}

var mutates = consumer.Capabilities{MutatesData: true}

func createProfiles(ctx context.Context, set processor.Settings, cfg component.Config, next xconsumer.Profiles) (xprocessor.Profiles, error) {
	e, err := newEnricher(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	return xprocessorhelper.NewProfiles(ctx, set, cfg, next, e.processProfiles,
		xprocessorhelper.WithStart(e.start), xprocessorhelper.WithShutdown(e.shutdown), xprocessorhelper.WithCapabilities(mutates))
}

func createLogs(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Logs) (processor.Logs, error) {
	e, err := newEnricher(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	return processorhelper.NewLogs(ctx, set, cfg, next, e.processLogs,
		processorhelper.WithStart(e.start), processorhelper.WithShutdown(e.shutdown), processorhelper.WithCapabilities(mutates))
}

func createMetrics(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics) (processor.Metrics, error) {
	e, err := newEnricher(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	return processorhelper.NewMetrics(ctx, set, cfg, next, e.processMetrics,
		processorhelper.WithStart(e.start), processorhelper.WithShutdown(e.shutdown), processorhelper.WithCapabilities(mutates))
}

func createTraces(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Traces) (processor.Traces, error) {
	e, err := newEnricher(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	return processorhelper.NewTraces(ctx, set, cfg, next, e.processTraces,
		processorhelper.WithStart(e.start), processorhelper.WithShutdown(e.shutdown), processorhelper.WithCapabilities(mutates))
}

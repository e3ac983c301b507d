// SPDX-License-Identifier: Apache-2.0

// Package cputimeconnector turns profiles into CPU time: a metric of CPU
// seconds by service and configured dimensions (the endpoint a thread
// context carries, the thread name), with exemplars naming the sampled
// spans, and a log record per span seen in an interval with its CPU time.
package cputimeconnector

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/connector/xconnector"
	"go.opentelemetry.io/collector/consumer"

	"github.com/otelctx/otelctx/connector/cputimeconnector/internal/metadata"
)

// NewFactory returns the cpu_time connector's factory.
func NewFactory() xconnector.Factory {
	return xconnector.NewFactory(metadata.Type, createDefaultConfig,
		xconnector.WithProfilesToMetrics(createProfilesToMetrics, metadata.ProfilesToMetricsStability),
		xconnector.WithProfilesToLogs(createProfilesToLogs, metadata.ProfilesToLogsStability),
		xconnector.WithDeprecatedTypeAlias(metadata.DeprecatedType))
}

func createDefaultConfig() component.Config {
	return &Config{
		// The endpoint as OTEP 4947 writers (http.route) and dd-trace's key
		// map (datadog.trace_endpoint) carry it, and the profiler's thread
		// name.
		Dimensions:         []Dimension{{Name: "http.route"}, {Name: "datadog.trace_endpoint"}, {Name: "thread.name"}},
		ResourceAttributes: []string{"service.name", "service.namespace", "service.instance.id", "deployment.environment.name", "host.name"},
		// Prometheus (the usual backend of such a metric) wants cumulative.
		AggregationTemporality:      Cumulative,
		AggregationCardinalityLimit: 2000,
		MetricsFlushInterval:        15 * time.Second,
		MetricsExpiration:           5 * time.Minute,
		Exemplars:                   Exemplars{Enabled: true, MaxPerDataPoint: 5},
		SpanRecords:                 SpanRecords{FlushInterval: 15 * time.Second, MaxPerInterval: 1000, TopFunctions: 3},
	}
}

func createProfilesToMetrics(_ context.Context, set connector.Settings, cfg component.Config, next consumer.Metrics) (xconnector.Profiles, error) {
	c := cfg.(*Config)
	conn, err := newConnector(set, c, newMetricsAgg(c, next, time.Now()))
	if err != nil {
		return nil, err
	}
	return conn, nil
}

func createProfilesToLogs(_ context.Context, set connector.Settings, cfg component.Config, next consumer.Logs) (xconnector.Profiles, error) {
	c := cfg.(*Config)
	conn, err := newConnector(set, c, newSpanAgg(c, next))
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// dimensionNames are the names of the configured dimensions, in order.
func dimensionNames(cfg *Config) []string {
	names := make([]string, 0, len(cfg.Dimensions))
	for _, d := range cfg.Dimensions {
		names = append(names, d.Name)
	}
	return names
}

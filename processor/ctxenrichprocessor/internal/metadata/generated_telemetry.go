// SPDX-License-Identifier: Apache-2.0

// Written by hand in the shape mdatagen generates from metadata.yaml
// (mdatagen is not available to this build: docs/building.md). Keep it in
// step with metadata.yaml until generation replaces it; metadata_test.go
// checks that the two agree.

package metadata

import (
	"errors"
	"sync"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"go.opentelemetry.io/collector/component"
)

func Meter(settings component.TelemetrySettings) metric.Meter {
	return settings.MeterProvider.Meter("github.com/otelctx/otelctx/processor/ctxenrichprocessor")
}

func Tracer(settings component.TelemetrySettings) trace.Tracer {
	return settings.TracerProvider.Tracer("github.com/otelctx/otelctx/processor/ctxenrichprocessor")
}

// TelemetryBuilder provides an interface for components to report telemetry
// as defined in metadata and user config.
type TelemetryBuilder struct {
	meter                       metric.Meter
	mu                          sync.Mutex
	registrations               []metric.Registration
	CtxenrichPidReuseRefusals   metric.Int64Counter
	CtxenrichResourcesJoined    metric.Int64Counter
	CtxenrichResourcesSplit     metric.Int64Counter
	CtxenrichResourcesUnmatched metric.Int64Counter
	CtxenrichSamplesEnriched    metric.Int64Counter
	CtxenrichSamplesInvalid     metric.Int64Counter
	CtxenrichSamplesSplit       metric.Int64Counter
	CtxenrichSamplesUnmatched   metric.Int64Counter
}

// TelemetryBuilderOption applies changes to default builder.
type TelemetryBuilderOption interface {
	apply(*TelemetryBuilder)
}

type telemetryBuilderOptionFunc func(mb *TelemetryBuilder)

func (tbof telemetryBuilderOptionFunc) apply(mb *TelemetryBuilder) {
	tbof(mb)
}

// Shutdown unregister all registered callbacks for async instruments.
func (builder *TelemetryBuilder) Shutdown() {
	builder.mu.Lock()
	defer builder.mu.Unlock()
	for _, reg := range builder.registrations {
		reg.Unregister()
	}
}

// NewTelemetryBuilder provides a struct with methods to update all internal telemetry
// for a component
func NewTelemetryBuilder(settings component.TelemetrySettings, options ...TelemetryBuilderOption) (*TelemetryBuilder, error) {
	builder := TelemetryBuilder{}
	for _, op := range options {
		op.apply(&builder)
	}
	builder.meter = Meter(settings)
	var err, errs error
	builder.CtxenrichPidReuseRefusals, err = builder.meter.Int64Counter(
		"otelcol_ctxenrich_pid_reuse_refusals",
		metric.WithDescription("Resources not joined because their data cannot be the cataloged process's (PID reused)."),
		metric.WithUnit("{resource}"),
	)
	errs = errors.Join(errs, err)
	builder.CtxenrichResourcesJoined, err = builder.meter.Int64Counter(
		"otelcol_ctxenrich_resources_joined",
		metric.WithDescription("Resources merged with their process's resource, by signal and by source (published, environment)."),
		metric.WithUnit("{resource}"),
	)
	errs = errors.Join(errs, err)
	builder.CtxenrichResourcesSplit, err = builder.meter.Int64Counter(
		"otelcol_ctxenrich_resources_split",
		metric.WithDescription("ResourceProfiles split into one per process because their samples named several."),
		metric.WithUnit("{resource}"),
	)
	errs = errors.Join(errs, err)
	builder.CtxenrichResourcesUnmatched, err = builder.meter.Int64Counter(
		"otelcol_ctxenrich_resources_unmatched",
		metric.WithDescription("Resources not joined, by reason (no_pid, no_process, lookup_budget)."),
		metric.WithUnit("{resource}"),
	)
	errs = errors.Join(errs, err)
	builder.CtxenrichSamplesEnriched, err = builder.meter.Int64Counter(
		"otelcol_ctxenrich_samples_enriched",
		metric.WithDescription("Profile samples given the span (link) and attributes their thread had when sampled."),
		metric.WithUnit("{sample}"),
	)
	errs = errors.Join(errs, err)
	builder.CtxenrichSamplesInvalid, err = builder.meter.Int64Counter(
		"otelcol_ctxenrich_samples_invalid",
		metric.WithDescription("Profile samples passed on untouched because an index they hold (or that their stack holds) is outside its table, or a timestamp is past 2262, by reason."),
		metric.WithUnit("{sample}"),
	)
	errs = errors.Join(errs, err)
	builder.CtxenrichSamplesSplit, err = builder.meter.Int64Counter(
		"otelcol_ctxenrich_samples_split",
		metric.WithDescription("Samples split because their timestamps fell in several spans of their thread."),
		metric.WithUnit("{sample}"),
	)
	errs = errors.Join(errs, err)
	builder.CtxenrichSamplesUnmatched, err = builder.meter.Int64Counter(
		"otelcol_ctxenrich_samples_unmatched",
		metric.WithDescription("Profile samples left as they were, by reason."),
		metric.WithUnit("{sample}"),
	)
	errs = errors.Join(errs, err)
	return &builder, errs
}

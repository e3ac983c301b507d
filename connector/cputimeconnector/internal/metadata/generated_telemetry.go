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
	return settings.MeterProvider.Meter("github.com/otelctx/otelctx/connector/cputimeconnector")
}

func Tracer(settings component.TelemetrySettings) trace.Tracer {
	return settings.TracerProvider.Tracer("github.com/otelctx/otelctx/connector/cputimeconnector")
}

// TelemetryBuilder provides an interface for components to report telemetry
// as defined in metadata and user config.
type TelemetryBuilder struct {
	meter                        metric.Meter
	mu                           sync.Mutex
	registrations                []metric.Registration
	CputimeSamplesAggregated     metric.Int64Counter
	CputimeSamplesOverflow       metric.Int64Counter
	CputimeSamplesSkipped        metric.Int64Counter
	CputimeSamplesUnknownService metric.Int64Counter
	CputimeSpanRecordsFolded     metric.Int64Counter
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
	builder.CputimeSamplesAggregated, err = builder.meter.Int64Counter(
		"otelcol_cputime_samples_aggregated",
		metric.WithDescription("Profile samples counted into the CPU time metric or the span records, by signal and by whether they name a span."),
		metric.WithUnit("{sample}"),
	)
	errs = errors.Join(errs, err)
	builder.CputimeSamplesOverflow, err = builder.meter.Int64Counter(
		"otelcol_cputime_samples_overflow",
		metric.WithDescription("Profile samples counted in the overflow point (otel.metric.overflow=true) because their series would pass aggregation_cardinality_limit."),
		metric.WithUnit("{sample}"),
	)
	errs = errors.Join(errs, err)
	builder.CputimeSamplesSkipped, err = builder.meter.Int64Counter(
		"otelcol_cputime_samples_skipped",
		metric.WithDescription("Profile samples not counted, by signal and reason: their profile does not measure CPU time (not_cpu), or an index or value they hold is invalid."),
		metric.WithUnit("{sample}"),
	)
	errs = errors.Join(errs, err)
	builder.CputimeSamplesUnknownService, err = builder.meter.Int64Counter(
		"otelcol_cputime_samples_unknown_service",
		metric.WithDescription("Profile samples counted under the fallback service name (unknown_service) because their resource has no service.name, by signal."),
		metric.WithUnit("{sample}"),
	)
	errs = errors.Join(errs, err)
	builder.CputimeSpanRecordsFolded, err = builder.meter.Int64Counter(
		"otelcol_cputime_span_records_folded",
		metric.WithDescription("Spans given no record because the interval already had span_records.max_per_interval of them (their CPU time is still in the metric), counted once per message they appear in."),
		metric.WithUnit("{span}"),
	)
	errs = errors.Join(errs, err)
	return &builder, errs
}

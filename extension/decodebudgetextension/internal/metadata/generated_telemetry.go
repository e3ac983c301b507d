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
	return settings.MeterProvider.Meter("github.com/otelctx/otelctx/extension/decodebudgetextension")
}

func Tracer(settings component.TelemetrySettings) trace.Tracer {
	return settings.TracerProvider.Tracer("github.com/otelctx/otelctx/extension/decodebudgetextension")
}

// TelemetryBuilder provides an interface for components to report telemetry
// as defined in metadata and user config.
type TelemetryBuilder struct {
	meter               metric.Meter
	mu                  sync.Mutex
	registrations       []metric.Registration
	DecodeBudgetRefused metric.Int64Counter
	DecodeBudgetWaits   metric.Int64Counter
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
	builder.DecodeBudgetRefused, err = builder.meter.Int64Counter(
		"otelcol_decode_budget_refused",
		metric.WithDescription("Profiles, traces and logs export requests refused before decoding, by reason: elements (more than max_elements; ResourceExhausted), malformed (not a valid request; InvalidArgument)."),
		metric.WithUnit("{request}"),
	)
	errs = errors.Join(errs, err)
	builder.DecodeBudgetWaits, err = builder.meter.Int64Counter(
		"otelcol_decode_budget_waits",
		metric.WithDescription("Export requests whose decoding waited for max_decoding_bytes (others were being decoded)."),
		metric.WithUnit("{request}"),
	)
	errs = errors.Join(errs, err)
	return &builder, errs
}

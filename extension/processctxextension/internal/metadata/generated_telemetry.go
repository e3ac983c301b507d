// SPDX-License-Identifier: Apache-2.0

// The extension's TelemetryBuilder is internal/processctxtel's: the
// watcher and the thread sources it hands the builder to cannot import
// this package. These names keep mdatagen's shape for the extension.

package metadata

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"go.opentelemetry.io/collector/component"

	"github.com/otelctx/otelctx/internal/processctxtel"
)

// TelemetryBuilder registers the extension's instruments (metadata.yaml).
type TelemetryBuilder = processctxtel.TelemetryBuilder

// TelemetryBuilderOption applies changes to the default builder.
type TelemetryBuilderOption = processctxtel.TelemetryBuilderOption

// NewTelemetryBuilder registers every instrument of metadata.yaml once.
func NewTelemetryBuilder(settings component.TelemetrySettings, options ...TelemetryBuilderOption) (*TelemetryBuilder, error) {
	return processctxtel.NewTelemetryBuilder(settings, options...)
}

func Meter(settings component.TelemetrySettings) metric.Meter { return processctxtel.Meter(settings) }

func Tracer(settings component.TelemetrySettings) trace.Tracer { return processctxtel.Tracer(settings) }

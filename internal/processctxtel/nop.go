// SPDX-License-Identifier: Apache-2.0

package processctxtel

import (
	"go.opentelemetry.io/otel/metric/noop"

	"go.opentelemetry.io/collector/component"
)

// NewNopTelemetryBuilder is a builder whose instruments record nothing
// (a watcher made without telemetry).
func NewNopTelemetryBuilder() *TelemetryBuilder {
	tb, err := NewTelemetryBuilder(component.TelemetrySettings{MeterProvider: noop.NewMeterProvider()})
	if err != nil { // the no-op meter never fails
		panic(err)
	}
	return tb
}

// SPDX-License-Identifier: Apache-2.0

package telemetrytest

import (
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Gauge is the last value of a gauge (int64 or float64) at the point whose
// attribute key is value (the first point when key is ""); ok is false
// while it has no such point.
func Gauge(tel *componenttest.Telemetry, name, key, value string) (v float64, ok bool) {
	m, err := tel.GetMetric(name)
	if err != nil {
		return 0, false
	}
	match := func(set attribute.Set) bool {
		got, ok := set.Value(attribute.Key(key))
		return key == "" || ok && got.AsString() == value
	}
	switch g := m.Data.(type) {
	case metricdata.Gauge[int64]:
		for _, dp := range g.DataPoints {
			if match(dp.Attributes) {
				return float64(dp.Value), true
			}
		}
	case metricdata.Gauge[float64]:
		for _, dp := range g.DataPoints {
			if match(dp.Attributes) {
				return dp.Value, true
			}
		}
	}
	return 0, false
}

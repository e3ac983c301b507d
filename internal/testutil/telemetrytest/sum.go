// SPDX-License-Identifier: Apache-2.0

package telemetrytest

import (
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Sum is an int64 counter's total over the points whose attribute key is
// value (every point when key or value is ""); 0 when the counter has no
// point yet.
func Sum(tel *componenttest.Telemetry, name, key, value string) int64 {
	m, err := tel.GetMetric(name)
	if err != nil {
		return 0
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		return 0
	}
	var n int64
	for _, dp := range sum.DataPoints {
		if v, ok := dp.Attributes.Value(attribute.Key(key)); key == "" || value == "" || ok && v.AsString() == value {
			n += dp.Value
		}
	}
	return n
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"reflect"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Instruments are the metrics the watcher records. They are the processctx
// extension's: its telemetry builder (the extension's internal/metadata,
// from its metadata.yaml) registers each once and hands them over; the
// fields are named as the builder's. A nil field records nothing.
type Instruments struct {
	ProcessctxCatalogEvictions          metric.Int64Counter
	ProcessctxCatalogLimit              metric.Int64Gauge
	ProcessctxCatalogThreadsRefused     metric.Int64Counter
	ProcessctxCatalogUsed               metric.Int64Gauge
	ProcessctxConcurrentUpdateRetries   metric.Int64Counter
	ProcessctxContexts                  metric.Int64Gauge
	ProcessctxDdBuffers                 metric.Int64Gauge
	ProcessctxDdBuffersLost             metric.Int64Counter
	ProcessctxDdHeadersRefused          metric.Int64Counter
	ProcessctxDdSearches                metric.Int64Counter
	ProcessctxDdSlotsRefused            metric.Int64Counter
	ProcessctxInvalidUtf8               metric.Int64Counter
	ProcessctxKeyMapRefreshes           metric.Int64Counter
	ProcessctxLimitsExceeded            metric.Int64Counter
	ProcessctxPolls                     metric.Int64Counter
	ProcessctxPrctlEventsDropped        metric.Int64Counter
	ProcessctxPrctlEventsLimited        metric.Int64Counter
	ProcessctxPrctlRescans              metric.Int64Counter
	ProcessctxProcessesQuarantined      metric.Int64Gauge
	ProcessctxProcessesScanned          metric.Int64Counter
	ProcessctxReadTimeouts              metric.Int64Counter
	ProcessctxReadsFailed               metric.Int64Counter
	ProcessctxReadsHung                 metric.Int64Gauge
	ProcessctxScanDuration              metric.Float64Histogram
	ProcessctxStalled                   metric.Int64Gauge
	ProcessctxThreadContextSource       metric.Int64Gauge
	ProcessctxThreadReadFailures        metric.Int64Counter
	ProcessctxThreadSamples             metric.Int64Counter
	ProcessctxThreadSamplesDropped      metric.Int64Counter
	ProcessctxThreadSamplesFollowed     metric.Int64Counter
	ProcessctxThreadSamplesFollowedRate metric.Float64Gauge
	ProcessctxThreadSnapshots           metric.Int64Counter
	ProcessctxThreadStopDuration        metric.Float64Histogram
	ProcessctxThreadsAlreadyTraced      metric.Int64Counter
	ProcessctxThreadsRead               metric.Int64Counter
	ProcessctxTLSResolutions            metric.Int64Counter
}

// noops are the no-op instruments of each field type.
var noops = map[reflect.Type]reflect.Value{
	reflect.TypeFor[metric.Int64Counter]():     reflect.ValueOf(noop.Int64Counter{}),
	reflect.TypeFor[metric.Int64Gauge]():       reflect.ValueOf(noop.Int64Gauge{}),
	reflect.TypeFor[metric.Float64Gauge]():     reflect.ValueOf(noop.Float64Gauge{}),
	reflect.TypeFor[metric.Float64Histogram](): reflect.ValueOf(noop.Float64Histogram{}),
}

// orNoop is a copy of in (nil: none given) whose nil fields are no-op
// instruments.
func (in *Instruments) orNoop() *Instruments {
	out := &Instruments{}
	if in != nil {
		*out = *in
	}
	v := reflect.ValueOf(out).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.IsNil() {
			f.Set(noops[f.Type()])
		}
	}
	return out
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelctx/otelctx/internal/entityevents"
	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

// telemetry records the receiver's own metrics: the instruments of its
// telemetry builder (metadata.yaml lists them) and their attribute sets;
// discovery and thread reading are counted by the extension.
type telemetry struct {
	*metadata.TelemetryBuilder
	// Attribute sets are built once: recording is on every round.
	eventAttrs map[string]metric.MeasurementOption
}

func newTelemetry(set component.TelemetrySettings) (*telemetry, error) {
	tb, err := metadata.NewTelemetryBuilder(set)
	if err != nil {
		return nil, err
	}
	t := &telemetry{TelemetryBuilder: tb, eventAttrs: map[string]metric.MeasurementOption{}}
	for _, typ := range []string{entityevents.EventTypeState, entityevents.EventTypeDelete} {
		t.eventAttrs[typ] = metric.WithAttributeSet(attribute.NewSet(attribute.String("event_type", typ)))
	}
	// At 0 from the start: an alert on drops must not see an absent series.
	t.ProcessctxEntityEventsDropped.Add(context.Background(), 0)
	return t, nil
}

func (t *telemetry) recordEvents(ctx context.Context, counts map[string]int64) {
	for typ, n := range counts {
		t.ProcessctxEntityEvents.Add(ctx, n, t.eventAttrs[typ])
	}
}

func (t *telemetry) recordDropped(ctx context.Context, n int) {
	t.ProcessctxEntityEventsDropped.Add(ctx, int64(n))
}

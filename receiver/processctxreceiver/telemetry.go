package processctxreceiver

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

// telemetry holds the receiver's own metrics (metadata.yaml lists them);
// discovery and thread reading are counted by the extension.
type telemetry struct {
	entityEvents metric.Int64Counter
	dropped      metric.Int64Counter
	// Attribute sets are built once: recording is on every round.
	eventAttrs map[string]metric.MeasurementOption
}

func newTelemetry(set component.TelemetrySettings) (*telemetry, error) {
	m := set.MeterProvider.Meter(metadata.ScopeName)
	t := &telemetry{eventAttrs: map[string]metric.MeasurementOption{}}
	var err error
	t.entityEvents, err = m.Int64Counter("otelcol_processctx_entity_events",
		metric.WithDescription("Entity events emitted, by event_type."), metric.WithUnit("{event}"))
	if err != nil {
		return nil, err
	}
	t.dropped, err = m.Int64Counter("otelcol_processctx_entity_events_dropped",
		metric.WithDescription("Entity events dropped because the logs pipeline did not keep up (its queue was full) or the receiver was shutting down."), metric.WithUnit("{event}"))
	for _, typ := range []string{eventTypeState, eventTypeDelete} {
		t.eventAttrs[typ] = metric.WithAttributeSet(attribute.NewSet(attribute.String("event_type", typ)))
	}
	return t, err
}

func (t *telemetry) recordEvents(ctx context.Context, counts map[string]int64) {
	for typ, n := range counts {
		t.entityEvents.Add(ctx, n, t.eventAttrs[typ])
	}
}

func (t *telemetry) recordDropped(ctx context.Context, n int) {
	t.dropped.Add(ctx, int64(n))
}

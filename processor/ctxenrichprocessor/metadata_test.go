package ctxenrichprocessor

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/processor/ctxenrichprocessor/internal/metadata"
)

// TestMetadataMatchesTelemetry: every instrument the processor registers
// (at creation, for each of its four signals) is in metadata.yaml with the
// same description, unit and kind, every metric metadata.yaml lists is
// registered, and the attribute enums are the values the code uses.
func TestMetadataMatchesTelemetry(t *testing.T) {
	md := telemetrytest.ReadMetadata(t, "metadata.yaml")
	rec := &telemetrytest.Recorder{}
	set := processortest.NewNopSettings(metadata.Type)
	set.TelemetrySettings.MeterProvider = rec
	cfg := testConfig(component.MustNewID("processctx"))
	f := NewFactory()
	ctx := context.Background()
	var comps []component.Component
	p, err := f.CreateProfiles(ctx, set, cfg, consumertest.NewNop())
	comps = append(comps, p)
	if err == nil {
		var l component.Component
		l, err = f.CreateLogs(ctx, set, cfg, consumertest.NewNop())
		comps = append(comps, l)
	}
	if err == nil {
		var m component.Component
		m, err = f.CreateMetrics(ctx, set, cfg, consumertest.NewNop())
		comps = append(comps, m)
	}
	if err == nil {
		var tr component.Component
		tr, err = f.CreateTraces(ctx, set, cfg, consumertest.NewNop())
		comps = append(comps, tr)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range comps {
		if err := c.Shutdown(ctx); err != nil { // never started: releases nothing
			t.Fatal(err)
		}
	}
	telemetrytest.CheckInstruments(t, md, metadata.ScopeName, rec.Instruments())

	telemetrytest.CheckEnum(t, md, "otelcol_ctxenrich_samples_unmatched", "sample_reason", "reason", reasonNames[:])
	telemetrytest.CheckEnum(t, md, "otelcol_ctxenrich_samples_invalid", "invalid_reason", "reason", invalidNames[1:])
	telemetrytest.CheckEnum(t, md, "otelcol_ctxenrich_resources_unmatched", "resource_reason", "reason",
		[]string{resourceNoPID, resourceNoProcess})
	telemetrytest.CheckEnum(t, md, "otelcol_ctxenrich_resources_joined", "signal", "signal", signals)
}

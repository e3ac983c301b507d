// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ctxenrichprocessor

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/otelctx/otelctx/internal/enrich"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/processor/ctxenrichprocessor/internal/metadata"
)

// TestMetadataMatchesTelemetry: every instrument the processor registers
// (at creation, for each of its four signals) is in metadata.yaml with the
// same description, unit and kind, registered once per processor, every
// metric metadata.yaml lists is registered, and the attribute enums are
// the values the code uses.
func TestMetadataMatchesTelemetry(t *testing.T) {
	md := telemetrytest.ReadMetadata(t, "metadata.yaml")
	cfg := testConfig(component.MustNewID("process_ctx"))
	f := NewFactory()
	ctx := context.Background()
	for _, signal := range []string{"profiles", "logs", "metrics", "traces"} {
		rec := &telemetrytest.Recorder{}
		set := processortest.NewNopSettings(metadata.Type)
		set.TelemetrySettings.MeterProvider = rec
		var c component.Component
		var err error
		switch signal {
		case "profiles":
			c, err = f.CreateProfiles(ctx, set, cfg, consumertest.NewNop())
		case "logs":
			c, err = f.CreateLogs(ctx, set, cfg, consumertest.NewNop())
		case "metrics":
			c, err = f.CreateMetrics(ctx, set, cfg, consumertest.NewNop())
		case "traces":
			c, err = f.CreateTraces(ctx, set, cfg, consumertest.NewNop())
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Shutdown(ctx); err != nil { // never started: releases nothing
			t.Fatal(err)
		}
		telemetrytest.CheckInstruments(t, md, metadata.ScopeName, rec.Instruments())
		telemetrytest.CheckRegisteredOnce(t, metadata.ScopeName, rec.Instruments())
	}

	var reasons, invalid []string
	for r := range enrich.NumReasons {
		reasons = append(reasons, r.String())
	}
	for r := enrich.Invalid(1); r < enrich.NumInvalid; r++ { // 0 is a valid sample
		invalid = append(invalid, r.String())
	}
	telemetrytest.CheckEnum(t, md, "otelcol_ctxenrich_samples_unmatched", "sample_reason", "reason", reasons)
	telemetrytest.CheckEnum(t, md, "otelcol_ctxenrich_samples_invalid", "invalid_reason", "reason", invalid)
	telemetrytest.CheckEnum(t, md, "otelcol_ctxenrich_resources_unmatched", "resource_reason", "reason",
		[]string{resourceNoPID, resourceNoProcess, resourceLookupBudget})
	telemetrytest.CheckEnum(t, md, "otelcol_ctxenrich_resources_joined", "signal", "signal", signals)
}

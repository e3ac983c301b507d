// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/otelctx/otelctx/connector/cputimeconnector/internal/metadata"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
)

// TestMetadataMatchesTelemetry: every instrument each output registers is
// in metadata.yaml with the same description, unit and kind, once per
// output, every listed metric is registered, and the attribute enums are
// the values the code uses.
func TestMetadataMatchesTelemetry(t *testing.T) {
	md := telemetrytest.ReadMetadata(t, "metadata.yaml")
	f := NewFactory()
	ctx := context.Background()
	for _, sig := range signalNames {
		rec := &telemetrytest.Recorder{}
		set := connectortest.NewNopSettings(metadata.Type)
		set.TelemetrySettings.MeterProvider = rec
		var c component.Component
		var err error
		if sig == "metrics" {
			c, err = f.CreateProfilesToMetrics(ctx, set, f.CreateDefaultConfig(), consumertest.NewNop())
		} else {
			c, err = f.CreateProfilesToLogs(ctx, set, f.CreateDefaultConfig(), consumertest.NewNop())
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		telemetrytest.CheckInstruments(t, md, metadata.ScopeName, rec.Instruments())
		telemetrytest.CheckRegisteredOnce(t, metadata.ScopeName, rec.Instruments())
	}
	telemetrytest.CheckEnum(t, md, "otelcol_cputime_samples_aggregated", "signal", "signal", signalNames[:])
	telemetrytest.CheckEnum(t, md, "otelcol_cputime_samples_aggregated", "span", "span", []string{spanLinked, spanNone})
	telemetrytest.CheckEnum(t, md, "otelcol_cputime_samples_skipped", "skip_reason", "reason", skipReasons())
}

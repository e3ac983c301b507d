// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/otelctx/otelctx/internal/entityevents"
	"github.com/otelctx/otelctx/internal/processctxtel"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

// watcherTelemetry is the process_ctx extension's telemetry builder on tel,
// as the extension hands it to its watcher.
func watcherTelemetry(t testing.TB, tel *componenttest.Telemetry) *processctxtel.TelemetryBuilder {
	t.Helper()
	tb, err := processctxtel.NewTelemetryBuilder(tel.NewTelemetrySettings())
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// TestMetadataMatchesTelemetry: the instruments the receiver registers are
// metadata.yaml's, with the same description, unit and kind, each
// registered once, and the event_type values are the ones it records.
func TestMetadataMatchesTelemetry(t *testing.T) {
	t.Parallel()
	md := telemetrytest.ReadMetadata(t, "metadata.yaml")
	rec := &telemetrytest.Recorder{}
	set := receivertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings.MeterProvider = rec
	rcv, err := NewFactory().CreateLogs(context.Background(), set, createDefaultConfig(), consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	telemetrytest.CheckInstruments(t, md, metadata.ScopeName, rec.Instruments())
	telemetrytest.CheckRegisteredOnce(t, metadata.ScopeName, rec.Instruments())
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_entity_events", "event_type", "event_type",
		[]string{entityevents.EventTypeState, entityevents.EventTypeDelete})
}

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
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/watcher"
	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

// watcherInstruments are the instruments the processctx extension's
// telemetry builder hands its watcher, created from the extension's
// metadata.yaml on tel.
func watcherInstruments(t testing.TB, tel *componenttest.Telemetry) *watcher.Instruments {
	t.Helper()
	in := &watcher.Instruments{}
	md := telemetrytest.ReadMetadata(t, "../../extension/processctxextension/metadata.yaml")
	telemetrytest.Instruments(t, tel.NewTelemetrySettings().MeterProvider.Meter("github.com/otelctx/otelctx/extension/processctxextension"), md, in)
	return in
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

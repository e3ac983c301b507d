// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/internal/entityevents"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
)

// TestStampOnlyRepublishEmitsNoEntityState: a publisher that publishes the
// same payload again (only published_at_ns moves) gets no entity_state
// event, over several polls after each of several republishes; a real
// change still gets one.
func TestStampOnlyRepublishEmitsNoEntityState(t *testing.T) {
	pub := testpub.Start(t, testpub.Glibc)
	pub.Set("service.name", "stamp-only", "service.instance.id", "inst-1")
	pub.Do("extra deployment.environment.name test")
	pub.Publish()

	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	sink, _ := startReceiver(t, watchertest.FastConfig(pub.PID), tel) // entity_interval: 1h
	states := func() int { return len(findType(sinkEvents(sink), pub.PID, entityevents.EventTypeState)) }
	eventually(t, "the first entity_state", func() bool { return states() > 0 })
	before := states()

	for i := 0; i < 5; i++ {
		pub.Publish() // the same payload, a new stamp
		polls := telemetrytest.Sum(tel, "otelcol_processctx_polls", "reason", "")
		eventually(t, "three more polls", func() bool { return telemetrytest.Sum(tel, "otelcol_processctx_polls", "reason", "") >= polls+3 })
		if n := states(); n != before {
			t.Fatalf("republish %d without a change: %d entity_state events, want %d: %v", i, n, before, sinkEvents(sink))
		}
	}

	pub.Set("service.version", "2.0")
	pub.Publish()
	eventually(t, "entity_state for the change", func() bool {
		for _, e := range findType(sinkEvents(sink), pub.PID, entityevents.EventTypeState) {
			if e.res["service.version"] == "2.0" {
				return true
			}
		}
		return false
	})
}

// findType returns the events for pid of one event type, all entity types.
func findType(events []event, pid int, eventType string) []event {
	var out []event
	for _, e := range events {
		if e.res["process.pid"] == int64(pid) && e.rec[attrEventType] == eventType {
			out = append(out, e)
		}
	}
	return out
}

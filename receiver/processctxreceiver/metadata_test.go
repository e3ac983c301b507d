package processctxreceiver

import (
	"context"
	"os"
	"reflect"
	"slices"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/threadread"
	"github.com/otelctx/otelctx/internal/scan/tlsvar"
	"github.com/otelctx/otelctx/internal/telemetrytest"
	"github.com/otelctx/otelctx/internal/testenv"
	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

// TestMetadataMatchesTelemetry: every instrument the receiver registers
// (at creation, and at Start for each thread_sampler: off, ptrace, ebpf)
// is in metadata.yaml with the same description, unit and kind, and every
// metric metadata.yaml lists is registered; the attribute enums are the
// values the code uses.
func TestMetadataMatchesTelemetry(t *testing.T) {
	testenv.RequireRoot(t) // Start's scanner and samplers
	md := telemetrytest.ReadMetadata(t, "metadata.yaml")
	rec := &telemetrytest.Recorder{}
	for _, sampler := range []string{ThreadSamplerOff, ThreadSamplerPtrace, ThreadSamplerEBPF} {
		set := receivertest.NewNopSettings(metadata.Type)
		set.TelemetrySettings.MeterProvider = rec
		cfg := fastConfig(os.Getpid())
		cfg.ThreadSampler = sampler
		rcv, err := NewFactory().CreateLogs(context.Background(), set, cfg, consumertest.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		// The eBPF sampler's instruments are created before it loads: a
		// kernel refusing it still registers them (Start then fails).
		if err := rcv.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Logf("thread_sampler %s: Start: %v", sampler, err)
		}
		if err := rcv.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	got := rec.Instruments()
	telemetrytest.CheckInstruments(t, md, metadata.ScopeName, got)
	// Two code paths register the same metric: one description between them.
	for _, in := range got {
		for _, other := range got {
			if in.Name == other.Name && !reflect.DeepEqual(in, other) {
				t.Errorf("%s registered twice, differently: %+v and %+v", in.Name, in, other)
			}
		}
	}

	var readReasons []string
	for _, r := range scan.Reasons() {
		readReasons = append(readReasons, r.String())
	}
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_reads_failed", "read_reason", "reason", readReasons)
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_entity_events", "event_type", "event_type",
		[]string{eventTypeState, eventTypeDelete})
	// The two literals of telemetry.go.
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_dd_searches", "dd_search_result", "result",
		[]string{"found", "not_found"})
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_tls_resolutions", "tls_table", "table",
		[]string{tlsvar.SymbolTableDynsym, tlsvar.SymbolTableSymtab})
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_dd_slots_refused", "dd_slot_reason", "reason",
		[]string{ddSlotBusy, ddSlotTorn, ddSlotCollision, ddSlotStale, ddSlotHeader, ddSlotUnlisted})

	// thread_read_failures: the ptrace snapshot's per-thread reasons that
	// threads.go counts (not the no-context ones, not already traced,
	// which has its own counter), the DD_OTEL_CTX slot reads' unreadable
	// slots, and the receiver's own process-level reasons.
	var threadReasons []string
	for _, r := range []string{
		threadread.ReasonNullPointer, threadread.ReasonNotAllocated, threadread.ReasonNotValid,
		threadread.ReasonAlreadyTraced, threadread.ReasonExited, threadread.ReasonTimeout,
		threadread.ReasonSlot, threadread.ReasonRead, threadread.ReasonStop, threadread.ReasonNotTried,
	} {
		if !threadread.NoContext(r) && r != threadread.ReasonAlreadyTraced {
			threadReasons = append(threadReasons, r)
		}
	}
	threadReasons = append(threadReasons, threadread.ReasonNotInBuffer,
		reasonNoSymbol, reasonUnsupported, reasonResolve, reasonSnapshot, reasonCatalogLimit, reasonDDRead,
		reasonSampleFault, reasonParse, reasonTrack, reasonPIDReused)
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_thread_read_failures", "thread_read_reason", "reason", threadReasons)

	// Every attribute metadata.yaml defines is used by a metric.
	for id := range md.Attributes {
		used := false
		for _, m := range md.Telemetry.Metrics {
			used = used || slices.Contains(m.Attributes, id)
		}
		if !used {
			t.Errorf("attribute %q is used by no metric in metadata.yaml", id)
		}
	}
}

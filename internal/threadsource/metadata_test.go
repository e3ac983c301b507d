// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/processctxtel"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/threads/threadread"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// metadataPath is the metadata.yaml of the extension whose metrics the
// sources record.
const metadataPath = "../../extension/processctxextension/metadata.yaml"

// testTelemetry is the extension's telemetry builder on tel, as the
// watcher hands it to a source.
func testTelemetry(t testing.TB, tel *componenttest.Telemetry) *processctxtel.TelemetryBuilder {
	t.Helper()
	tb, err := processctxtel.NewTelemetryBuilder(tel.NewTelemetrySettings())
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// TestMetadataEnums: the attribute values metadata.yaml lists are the
// values the sources record (the extension's metadata test checks the
// instruments, the watcher's its own enums).
func TestMetadataEnums(t *testing.T) {
	t.Parallel()
	md := telemetrytest.ReadMetadata(t, metadataPath)
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_tls_resolutions", "tls_table", "table",
		[]string{tlsvar.SymbolTableDynsym, tlsvar.SymbolTableSymtab})
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_key_map_refreshes", "key_map_result", "result",
		[]string{keyMapUpdated, keyMapUnchanged, keyMapFailed})
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_thread_context_source", "thread_context_source", "source", Places)
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_dd_slots_refused", "dd_slot_reason", "reason",
		[]string{ddSlotBusy, ddSlotTorn, ddSlotCollision, ddSlotStale, ddSlotHeader, ddSlotUnlisted})

	// thread_read_failures: the ptrace snapshot's per-thread reasons that
	// ptrace.go counts (not the no-context ones, not already traced,
	// which has its own counter), the DD_OTEL_CTX slot reads' unreadable
	// slots, and the sources' own process-level reasons.
	var threadReasons []string
	for _, r := range []string{
		threadread.ReasonNullPointer, threadread.ReasonNotAllocated, threadread.ReasonNotValid,
		threadread.ReasonAlreadyTraced, threadread.ReasonExited, threadread.ReasonTimeout,
		threadread.ReasonSlot, threadread.ReasonRead, threadread.ReasonStop, threadread.ReasonNotTried, threadread.ReasonThreadCap,
	} {
		if !threadread.NoContext(r) && r != threadread.ReasonAlreadyTraced {
			threadReasons = append(threadReasons, r)
		}
	}
	threadReasons = append(threadReasons, threadread.ReasonNotInBuffer,
		reasonNoSymbol, reasonUnsupported, reasonResolve, reasonResolveLimit, reasonSnapshot, reasonCatalogLimit, reasonDDRead,
		reasonSampleFault, reasonParse, reasonTrack, reasonPIDReused, reasonUserShare,
		nodectx.ReasonBadPointer, nodectx.ReasonBadTable, nodectx.ReasonLongChain, nodectx.ReasonRead)
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_thread_read_failures", "thread_read_reason", "reason", threadReasons)
}

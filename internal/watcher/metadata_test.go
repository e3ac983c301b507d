// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"slices"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/threads/threadread"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// metadataPath is the metadata.yaml of the extension that runs the watcher
// and registers its telemetry; scopeName its instrumentation scope.
const (
	metadataPath = "../../extension/processctxextension/metadata.yaml"
	scopeName    = "github.com/otelctx/otelctx/extension/processctxextension"
)

// testInstruments are the instruments the extension's telemetry builder
// hands the watcher, created from its metadata.yaml on tel.
func testInstruments(t testing.TB, tel *componenttest.Telemetry) *Instruments {
	t.Helper()
	in := &Instruments{}
	telemetrytest.Instruments(t, tel.NewTelemetrySettings().MeterProvider.Meter(scopeName), telemetrytest.ReadMetadata(t, metadataPath), in)
	return in
}

// TestMetadataEnums: the attribute values metadata.yaml lists are the
// values the code records (the extension's metadata test checks the
// instruments), and every attribute it defines is used by a metric.
func TestMetadataEnums(t *testing.T) {
	t.Parallel()
	md := telemetrytest.ReadMetadata(t, metadataPath)
	var readReasons []string
	for _, r := range scan.Reasons() {
		readReasons = append(readReasons, r.String())
	}
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_reads_failed", "read_reason", "reason", readReasons)
	// The two literals of telemetry.go.
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_dd_searches", "dd_search_result", "result",
		[]string{"found", "not_found"})
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_tls_resolutions", "tls_table", "table",
		[]string{tlsvar.SymbolTableDynsym, tlsvar.SymbolTableSymtab})
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_key_map_refreshes", "key_map_result", "result",
		[]string{keyMapUpdated, keyMapUnchanged, keyMapFailed})
	catalogKinds := []string{catalogProcesses, catalogRetained, catalogThreads, catalogRuns}
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_catalog_used", "catalog_kind", "kind", catalogKinds)
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_catalog_limit", "catalog_kind", "kind", catalogKinds)
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_catalog_evictions", "catalog_eviction_kind", "kind",
		[]string{catalogThreads, catalogRuns, catalogRetained})
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_thread_context_source", "thread_context_source", "source", threadSources)
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_dd_slots_refused", "dd_slot_reason", "reason",
		[]string{ddSlotBusy, ddSlotTorn, ddSlotCollision, ddSlotStale, ddSlotHeader, ddSlotUnlisted})
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_invalid_utf8", "utf8_source", "source",
		[]string{utf8ProcessContext, utf8ThreadRecord})

	// thread_read_failures: the ptrace snapshot's per-thread reasons that
	// threads.go counts (not the no-context ones, not already traced,
	// which has its own counter), the DD_OTEL_CTX slot reads' unreadable
	// slots, and the watcher's own process-level reasons.
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
		reasonNoSymbol, reasonUnsupported, reasonResolve, reasonResolveLimit, reasonSnapshot, reasonCatalogLimit, reasonDDRead,
		reasonSampleFault, reasonParse, reasonTrack, reasonPIDReused,
		nodectx.ReasonBadPointer, nodectx.ReasonBadTable, nodectx.ReasonLongChain, nodectx.ReasonRead)
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

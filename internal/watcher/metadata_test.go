// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"slices"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/internal/processctxtel"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/threadsource"
)

// metadataPath is the metadata.yaml of the extension that runs the watcher
// and registers its telemetry; scopeName its instrumentation scope.
const (
	metadataPath = "../../extension/processctxextension/metadata.yaml"
	scopeName    = "github.com/otelctx/otelctx/extension/processctxextension"
)

// testTelemetry is the extension's telemetry builder on tel, as the
// extension hands it to the watcher.
func testTelemetry(t testing.TB, tel *componenttest.Telemetry) *processctxtel.TelemetryBuilder {
	t.Helper()
	tb, err := processctxtel.NewTelemetryBuilder(tel.NewTelemetrySettings())
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// TestMetadataEnums: the attribute values metadata.yaml lists are the
// values the watcher records (the extension's metadata test checks the
// instruments), and every attribute it defines is used by a metric.
func TestMetadataEnums(t *testing.T) {
	t.Parallel()
	md := telemetrytest.ReadMetadata(t, metadataPath)
	var readReasons []string
	for _, r := range scan.Reasons() {
		readReasons = append(readReasons, r.String())
	}
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_reads_failed", "read_reason", "reason", readReasons)
	// The literals of telemetry.go.
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_dd_searches", "dd_search_result", "result",
		[]string{"found", "not_found"})
	catalogKinds := []string{catalogProcesses, catalogRetained, catalogThreads, catalogRuns}
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_catalog_used", "catalog_kind", "kind", catalogKinds)
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_catalog_limit", "catalog_kind", "kind", catalogKinds)
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_catalog_evictions", "catalog_eviction_kind", "kind",
		[]string{catalogThreads, catalogRuns, catalogRetained, catalogTracked})
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_thread_context_source", "thread_context_source", "source", threadsource.Places)
	// thread_record is internal/threadsource's (its metadata test checks
	// its other enums).
	telemetrytest.CheckEnum(t, md, "otelcol_processctx_invalid_utf8", "utf8_source", "source",
		[]string{utf8ProcessContext, "thread_record"})

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

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"
	"errors"

	"github.com/otelctx/otelctx/internal/processctxtel"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// Process-level reasons of thread_read_failures.
const (
	reasonNoSymbol    = "no symbol"
	reasonUnsupported = "unsupported"
	reasonResolve     = "resolve error"
	// reasonResolveLimit: the process's files or mappings are over the TLS
	// resolver's bounds (tlsvar.ErrLimit: memory, modules, read budget).
	reasonResolveLimit = "resolve limit"
	reasonSnapshot     = "snapshot error"
	// reasonCatalogLimit: records the catalog dropped (per-process thread
	// limit).
	reasonCatalogLimit = "catalog limit"
)

// Reasons of thread_read_failures specific to the eBPF sampler.
const (
	reasonSampleFault = "sample fault" // the kernel could not read a slot or record
	reasonParse       = "parse error"  // a sampled record was too short
	reasonTrack       = "track error"  // the sampler refused a process
	// reasonPIDReused: the kernel saw a tracked PID held by a process with
	// another start time (the tracked one exited, its PID was reused before
	// the next sync untracked it) and read nothing.
	reasonPIDReused = "pid reused"
)

// reasonDDRead: the DD_OTEL_CTX slots of a process could not be read at
// all (thread_read_failures).
const reasonDDRead = "dd read error"

// Reasons of otelcol_processctx_dd_slots_refused (both sources count
// them, under the same name).
const (
	ddSlotBusy      = ddring.RefusedBusy
	ddSlotTorn      = ddring.RefusedTorn
	ddSlotCollision = "collision" // another live thread maps to the slot
	ddSlotStale     = "stale"     // the slot still holds an exited thread's value
	ddSlotHeader    = ddring.RefusedHeader
	ddSlotUnlisted  = "unlisted" // eBPF: the threads could not be listed after the sample (the process exited)
)

// utf8ThreadRecord is this package's source of invalid_utf8 (the
// watcher counts process_context).
const utf8ThreadRecord = "thread_record"

// telemetry records the thread-context metrics of both sources, each
// labelled one through its own counter.
type telemetry struct {
	tb          *processctxtel.TelemetryBuilder
	failures    *processctxtel.Counter // thread_read_failures by reason
	ddRefused   *processctxtel.Counter // dd_slots_refused by reason, whichever source read the slots
	tlsTables   *processctxtel.Counter // tls_resolutions by table (tlstable.go)
	keyMaps     *processctxtel.Counter // key_map_refreshes by result (keymap.go)
	invalidUTF8 *processctxtel.Counter // invalid_utf8 of thread records
}

func newTelemetry(tb *processctxtel.TelemetryBuilder) *telemetry {
	return &telemetry{
		tb: tb,
		failures: processctxtel.NewCounter(tb.ProcessctxThreadReadFailures, "reason",
			reasonNoSymbol, reasonUnsupported, reasonResolve, reasonResolveLimit, reasonSnapshot, reasonCatalogLimit,
			reasonSampleFault, reasonParse, reasonTrack, reasonPIDReused, reasonDDRead, reasonUserShare),
		ddRefused: processctxtel.NewCounter(tb.ProcessctxDdSlotsRefused, "reason",
			ddSlotBusy, ddSlotTorn, ddSlotCollision, ddSlotStale, ddSlotHeader, ddSlotUnlisted),
		tlsTables:   processctxtel.NewCounter(tb.ProcessctxTLSResolutions, "table", tlsvar.SymbolTableDynsym, tlsvar.SymbolTableSymtab),
		keyMaps:     processctxtel.NewCounter(tb.ProcessctxKeyMapRefreshes, "result", keyMapUpdated, keyMapUnchanged, keyMapFailed),
		invalidUTF8: processctxtel.NewCounter(tb.ProcessctxInvalidUtf8, "source", utf8ThreadRecord),
	}
}

// fail counts n reads that failed for reason (goroutines of both the
// samples and the tracking sync call it).
func (t *telemetry) fail(ctx context.Context, reason string, n int) {
	t.failures.Add(ctx, reason, int64(n))
}

// refused counts n DD_OTEL_CTX slots refused for reason.
func (t *telemetry) refused(ctx context.Context, reason string, n int64) {
	if n > 0 {
		t.ddRefused.Add(ctx, reason, n)
	}
}

// invalid counts n strings of a record whose invalid UTF-8 was replaced.
func (t *telemetry) invalid(ctx context.Context, n int) {
	if n > 0 {
		t.invalidUTF8.Add(ctx, utf8ThreadRecord, int64(n))
	}
}

// locateReason is the thread_read_failures reason of a failed
// registry.Locate: its resolution's, or unsupported (the variable found or
// the walk to the record is not the schema's).
func locateReason(err error) string {
	if re := (*registry.ResolveError)(nil); errors.As(err, &re) {
		return resolveReason(re.Err)
	}
	return reasonUnsupported
}

// resolveReason is the thread_read_failures reason of a failed TLS
// resolution (both sources).
func resolveReason(err error) string {
	switch {
	case errors.Is(err, tlsvar.ErrLimit): // before ErrNotFound, which it may wrap
		return reasonResolveLimit
	case errors.Is(err, tlsvar.ErrNotFound):
		return reasonNoSymbol
	case errors.Is(err, tlsvar.ErrUnsupported):
		return reasonUnsupported
	}
	return reasonResolve
}

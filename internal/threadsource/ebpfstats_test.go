// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"
	"testing"

	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/schema"
)

// TestKernelRefused: a refusal of a buffer's slot read is counted as a
// refused slot, one of a variable's read as a failed read, each under the
// sampler's reason.
func TestKernelRefused(t *testing.T) {
	tel, ttel := readerTelemetry(t)
	ctx := context.Background()
	ttel.kernelRefused(ctx, sampler.Refusal{Read: schema.ReadDDSlot, Reason: ddSlotTorn}, 3)
	ttel.kernelRefused(ctx, sampler.Refusal{Read: schema.ReadNodeWalk, Reason: nodectx.ReasonBadTable}, 2)
	if n := telemetrytest.Sum(tel, "otelcol_processctx_dd_slots_refused", "reason", ddSlotTorn); n != 3 {
		t.Errorf("dd_slots_refused torn: %d, want 3", n)
	}
	if n := telemetrytest.Sum(tel, "otelcol_processctx_thread_read_failures", "reason", nodectx.ReasonBadTable); n != 2 {
		t.Errorf("thread_read_failures %q: %d, want 2", nodectx.ReasonBadTable, n)
	}
	if n := telemetrytest.Sum(tel, "otelcol_processctx_thread_read_failures", "reason", ddSlotTorn); n != 0 {
		t.Errorf("a refused slot counted as a failed read: %d", n)
	}
}

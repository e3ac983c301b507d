// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"
	"time"

	"github.com/otelctx/otelctx/internal/format/nodectx"
)

// statsEvery bounds how often a round's sync reads the kernel counters:
// each read is one per-CPU map lookup per counter, and prctl rounds come
// dozens a second under process churn.
const statsEvery = time.Second

// recordStats adds the kernel counters' growth since the last call.
func (t *EBPF) recordStats(ctx context.Context) {
	st, err := t.s.Stats()
	if err != nil {
		return
	}
	now := time.Now()
	if !t.statsAt.IsZero() {
		if d := now.Sub(t.statsAt).Seconds(); d > 0 {
			t.tel.tb.ProcessctxThreadSamplesFollowedRate.Record(ctx, float64(st.Followed-t.last.Followed)/d)
		}
	}
	t.statsAt = now
	if d := st.Dropped - t.last.Dropped; d > 0 {
		t.tel.tb.ProcessctxThreadSamplesDropped.Add(ctx, int64(d))
	}
	if d := st.PrctlDropped - t.last.PrctlDropped; d > 0 {
		t.tel.tb.ProcessctxPrctlEventsDropped.Add(ctx, int64(d))
	}
	if d := st.PrctlLimited - t.last.PrctlLimited; d > 0 {
		t.tel.tb.ProcessctxPrctlEventsLimited.Add(ctx, int64(d))
	}
	if d := st.Failures - t.last.Failures; d > 0 {
		t.tel.fail(ctx, reasonSampleFault, int(d))
	}
	if d := st.Stale - t.last.Stale; d > 0 {
		t.tel.fail(ctx, reasonPIDReused, int(d))
	}
	for reason, d := range map[string]uint64{nodectx.ReasonBadPointer: st.NodeBadPointer - t.last.NodeBadPointer,
		nodectx.ReasonBadTable: st.NodeBadTable - t.last.NodeBadTable, nodectx.ReasonLongChain: st.NodeLongChain - t.last.NodeLongChain} {
		if d > 0 {
			t.tel.fail(ctx, reason, int(d))
		}
	}
	t.tel.refused(ctx, ddSlotBusy, int64(st.DDBusy-t.last.DDBusy))
	t.tel.refused(ctx, ddSlotTorn, int64(st.DDTorn-t.last.DDTorn))
	t.tel.refused(ctx, ddSlotHeader, int64(st.DDHeader-t.last.DDHeader))
	t.last = st
}

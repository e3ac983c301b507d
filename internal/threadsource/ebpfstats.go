// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"
	"time"

	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
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
	if t.statsAt.IsZero() {
		// The drop counters exist from the first round, at 0: an alert on
		// drops must not see an absent series.
		t.tel.tb.ProcessctxThreadSamplesDropped.Add(ctx, 0)
		t.tel.tb.ProcessctxPrctlEventsDropped.Add(ctx, 0)
	} else {
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
	for r, n := range st.Refused {
		if d := n - t.last.Refused[r]; d > 0 {
			t.tel.kernelRefused(ctx, r, d)
		}
	}
	t.last = st
}

// kernelRefused counts n reads the kernel refused: a buffer's slots as
// refused slots, a variable's read as a failed read, by the reason the
// sampler gives (the label values are the schema's).
func (t *telemetry) kernelRefused(ctx context.Context, r sampler.Refusal, n uint64) {
	if readsBuffer(r.Read) {
		t.refused(ctx, r.Reason, int64(n))
		return
	}
	t.fail(ctx, r.Reason, int(n))
}

// readsBuffer: the schemas the sampler reads with read are found as
// process buffers.
func readsBuffer(read schema.SamplerRead) bool {
	for _, s := range registry.All {
		if s.SamplerRead() == read {
			_, ok := s.(schema.BufferSchema)
			return ok
		}
	}
	return false
}

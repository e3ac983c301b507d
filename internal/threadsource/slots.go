// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring/ddslots"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// slotReader reads the slots of the ptrace path's processes' buffers
// (every buffer schema's a snapshot reads as slots, schema.BufferSchema's
// Slots: the DD_OTEL_CTX ring; ddslots.ProcessReader keeps each buffer's
// slot history per process identity) and counts what it refused.
type slotReader struct {
	log   *zap.Logger
	tel   *telemetry
	slots *ddslots.ProcessReader
}

func newSlotReader(log *zap.Logger, tel *telemetry) *slotReader {
	return &slotReader{log: log, tel: tel, slots: ddslots.NewProcessReader("")}
}

// read reads the slots of p's threads in buf; nil when the read failed
// (counted).
func (d *slotReader) read(ctx context.Context, p *publisher.Process, buf publisher.Buffer) []threadread.Thread {
	threads, st, err := d.slots.Read(p.ID, buf)
	if err != nil {
		d.tel.fail(ctx, reasonDDRead, 1)
		d.log.Debug("buffer slots not read", zap.Int("pid", p.ID.PID), zap.String("schema", buf.Schema), zap.Error(err))
		return nil
	}
	d.tel.tb.ProcessctxThreadsRead.Add(ctx, int64(st.Records))
	for r, n := range map[string]int{ddSlotBusy: st.InProgress, ddSlotTorn: st.Torn, ddSlotCollision: st.Collisions, ddSlotStale: st.Stale} {
		d.tel.refused(ctx, r, int64(n))
	}
	if st.Unreadable > 0 {
		d.tel.fail(ctx, threadread.ReasonNotInBuffer, st.Unreadable)
	}
	return threads
}

// retain forgets the slot histories of processes no longer read.
func (d *slotReader) retain(live map[publisher.ProcessID]bool) { d.slots.Retain(live) }

// slotsBuffer is p's buffer a snapshot reads as slots (nil: none): that
// of any buffer schema the registry knows.
func slotsBuffer(p *publisher.Process) *publisher.Buffer {
	return bufferOf(p, func(schema.BufferSchema) bool { return true })
}

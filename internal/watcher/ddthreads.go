package watcher

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/attribution"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// Reasons of otelcol_processctx_dd_slots_refused (the eBPF sampler counts
// the same reasons under the same name).
const (
	ddSlotBusy      = "busy"      // in_use set at one of the reads
	ddSlotTorn      = "torn"      // the slot changed between the two reads
	ddSlotCollision = "collision" // another live thread maps to the slot
	ddSlotStale     = "stale"     // the slot still holds an exited thread's value
	ddSlotHeader    = "header"    // the buffer's header changed (an exec): eBPF, not read
	ddSlotUnlisted  = "unlisted"  // eBPF: the threads could not be listed after the sample (the process exited)
)

// reasonDDRead: the DD_OTEL_CTX slots of a process could not be read at
// all (thread_read_failures).
const reasonDDRead = "dd read error"

// ddSlotCounter counts otelcol_processctx_dd_slots_refused by reason,
// whichever path read the slots.
type ddSlotCounter struct {
	c     metric.Int64Counter
	attrs map[string]metric.MeasurementOption
}

func newDDSlotCounter(in *Instruments) *ddSlotCounter {
	d := &ddSlotCounter{c: in.ProcessctxDdSlotsRefused, attrs: map[string]metric.MeasurementOption{}}
	for _, r := range []string{ddSlotBusy, ddSlotTorn, ddSlotCollision, ddSlotStale, ddSlotHeader, ddSlotUnlisted} {
		d.attrs[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r)))
	}
	return d
}

func (d *ddSlotCounter) add(ctx context.Context, reason string, n int64) {
	if n > 0 {
		d.c.Add(ctx, n, d.attrs[reason])
	}
}

// ddSlotReader reads the DD_OTEL_CTX slots of the ptrace path's processes
// (attribution.DDSlots keeps each buffer's slot history per process
// identity) and counts what it refused.
type ddSlotReader struct {
	log   *zap.Logger
	tel   *threadTelemetry
	slots *attribution.DDSlots
}

func newDDSlotReader(log *zap.Logger, tel *threadTelemetry) *ddSlotReader {
	return &ddSlotReader{log: log, tel: tel, slots: attribution.NewDDSlots("")}
}

// read reads the slots of p's threads; nil when the read failed (counted).
func (d *ddSlotReader) read(ctx context.Context, p *publisher.Process) []threadread.Thread {
	threads, st, err := d.slots.Read(p.ID, *p.DDBuffer)
	if err != nil {
		d.tel.fail(ctx, reasonDDRead, 1)
		d.log.Debug("DD_OTEL_CTX slots not read", zap.Int("pid", p.ID.PID), zap.Error(err))
		return nil
	}
	d.tel.in.ProcessctxThreadsRead.Add(ctx, int64(st.Records))
	for r, n := range map[string]int{ddSlotBusy: st.InProgress, ddSlotTorn: st.Torn, ddSlotCollision: st.Collisions, ddSlotStale: st.Stale} {
		d.tel.ddRefused.add(ctx, r, int64(n))
	}
	if st.Unreadable > 0 {
		d.tel.fail(ctx, threadread.ReasonNotInBuffer, st.Unreadable)
	}
	return threads
}

// retain forgets the slot histories of processes no longer read.
func (d *ddSlotReader) retain(live map[publisher.ProcessID]bool) { d.slots.Retain(live) }

package watcher

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/ddotel"
	"github.com/otelctx/otelctx/internal/scan/threadread"
)

// Reasons of otelcol_processctx_dd_slots_refused (the eBPF sampler counts
// the same reasons under the same name).
const (
	ddSlotBusy      = "busy"      // in_use set at one of the reads
	ddSlotTorn      = "torn"      // the slot changed between the two reads
	ddSlotCollision = "collision" // another live thread maps to the slot
	ddSlotStale     = "stale"     // the slot still holds an exited thread's value
	ddSlotHeader    = "header"    // the buffer's header changed (an exec): eBPF, not read
	ddSlotUnlisted  = "unlisted"  // eBPF: a thread not in the last listing (started since)
)

// reasonDDRead: the DD_OTEL_CTX slots of a process could not be read at
// all (thread_read_failures).
const reasonDDRead = "dd read error"

// ddSlotReader reads the DD_OTEL_CTX slots of the ptrace path's processes,
// keeping each buffer's slot history (ddotel.Owners) per process identity.
type ddSlotReader struct {
	log     *zap.Logger
	tel     *threadTelemetry
	refused metric.Int64Counter
	attrs   map[string]metric.MeasurementOption
	owners  map[scan.ProcessID]ddSlotOwners
}

type ddSlotOwners struct {
	buf    ddotel.Buffer
	owners *ddotel.Owners
	// ns finds the threads' TIDs in the process's PID namespace, which
	// index the slots (each thread's status is read once).
	ns *ddotel.NSTIDs
}

func newDDSlotReader(log *zap.Logger, m metric.Meter, tel *threadTelemetry) (*ddSlotReader, error) {
	d := &ddSlotReader{log: log, tel: tel, attrs: map[string]metric.MeasurementOption{}, owners: map[scan.ProcessID]ddSlotOwners{}}
	var err error
	// The eBPF path's counter (ebpf.go) has the same name and description
	// (one metric, one description, whichever path reads the slots); this
	// path only counts the first four reasons.
	d.refused, err = m.Int64Counter("otelcol_processctx_dd_slots_refused",
		metric.WithDescription("DD_OTEL_CTX slots read and not attributed to their thread, by reason (busy, torn, collision, stale, header, unlisted)."), metric.WithUnit("{slot}"))
	for _, r := range []string{ddSlotBusy, ddSlotTorn, ddSlotCollision, ddSlotStale} {
		d.attrs[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r)))
	}
	return d, err
}

// read reads the slots of p's threads; nil when the read failed (counted).
func (d *ddSlotReader) read(ctx context.Context, p *scan.Process) []threadread.Thread {
	o, ok := d.owners[p.ID]
	if !ok || o.buf != *p.DDBuffer {
		o = ddSlotOwners{buf: *p.DDBuffer, owners: ddotel.NewOwners(), ns: ddotel.NewNSTIDs("", p.ID.PID)}
		d.owners[p.ID] = o
	}
	threads, st, err := threadread.ReadDD("", p.ID.PID, *p.DDBuffer, o.owners, o.ns)
	if err != nil {
		d.tel.fail(ctx, reasonDDRead, 1)
		d.log.Debug("DD_OTEL_CTX slots not read", zap.Int("pid", p.ID.PID), zap.Error(err))
		return nil
	}
	d.tel.threadsRead.Add(ctx, int64(st.Records))
	for r, n := range map[string]int{ddSlotBusy: st.InProgress, ddSlotTorn: st.Torn, ddSlotCollision: st.Collisions, ddSlotStale: st.Stale} {
		if n > 0 {
			d.refused.Add(ctx, int64(n), d.attrs[r])
		}
	}
	if st.Unreadable > 0 {
		d.tel.fail(ctx, threadread.ReasonNotInBuffer, st.Unreadable)
	}
	if threads == nil {
		threads = []threadread.Thread{} // read, no thread: not a failure
	}
	return threads
}

// retain forgets the slot histories of processes no longer read.
func (d *ddSlotReader) retain(live map[scan.ProcessID]bool) {
	for id := range d.owners {
		if !live[id] {
			delete(d.owners, id)
		}
	}
}

package threadread

import (
	"errors"
	"fmt"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/scan/ddotel"
	"github.com/otelctx/otelctx/internal/scan/ptrace"
	"github.com/otelctx/otelctx/internal/scan/remote"
)

// Reasons a thread has no record from a DD_OTEL_CTX buffer.
const (
	ReasonEmptySlot   = "empty slot"        // the slot is zero: no active context
	ReasonInProgress  = "write in progress" // in_use was 1 at one of the two reads
	ReasonTorn        = "torn"              // the slot changed between the two reads
	ReasonCollision   = "collision"         // another live thread maps to the same slot
	ReasonStaleOwner  = "stale owner"       // the slot still holds an exited thread's value
	ReasonNotInBuffer = "not in buffer"     // the slot could not be read
)

// DDStats count the outcomes of one ReadDD.
type DDStats struct {
	ddotel.ReadStats
	// Started counts threads that appeared while the slots were read; the
	// threads sharing a slot with one of them are reported as collisions.
	Started int
	// Exited counts threads listed before the read and gone after it.
	Exited int
}

// ReadDD reads the DD_OTEL_CTX slot of every thread of pid without
// stopping any (the in_use protocol is made for concurrent readers, and
// ddotel.ReadSlots reads each slot twice in one call, refusing a slot that
// was being written or changed). Threads are listed before and after the
// read: a thread that started meanwhile may have written a slot it shares
// with a thread that was read, so that thread is reported as a collision;
// a thread that exited meanwhile gets ReasonExited. owners (nil: none) is
// the process's slot history (ddotel.Owners), kept by the caller per
// process identity and buffer. Slots are indexed by the threads' TIDs in
// the process's PID namespace (a containerised writer's gettid), found
// with ns (nil: one made for the call; keep one per process identity so
// that each thread's status is read once); Thread.TID stays the listed TID.
func ReadDD(procRoot string, pid int, b ddotel.Buffer, owners *ddotel.Owners, ns *ddotel.NSTIDs) ([]Thread, DDStats, error) {
	var st DDStats
	if procRoot == "" {
		procRoot = "/proc"
	}
	if ns == nil {
		ns = ddotel.NewNSTIDs(procRoot, pid)
	}
	before, err := ptrace.ListThreads(procRoot, pid)
	if err != nil {
		return nil, st, err
	}
	reads, rst, err := ddotel.ReadSlots(remote.Memory{PID: pid}, b, before, ddotel.ReadOptions{Owners: owners, ProcRoot: procRoot, NS: ns})
	st.ReadStats = rst
	if err != nil {
		return nil, st, fmt.Errorf("pid %d: DD_OTEL_CTX slots: %w", pid, err)
	}
	after, err := ptrace.ListThreads(procRoot, pid)
	if err != nil {
		return nil, st, err
	}
	alive := make(map[int]bool, len(after))
	for _, tid := range after {
		alive[tid] = true
	}
	listed := make(map[int]bool, len(before))
	for _, tid := range before {
		listed[tid] = true
	}
	// Slots of threads that started during the read: whoever else maps
	// there may have been read with the newcomer's write.
	// A newcomer whose namespace TID cannot be read exited already; its
	// slot is unknown, so every slot is suspect.
	fresh, anyFresh := map[uint32]bool{}, false
	for _, tid := range after {
		if !listed[tid] {
			st.Started++
			if nsTID, err := ns.TID(tid); err == nil {
				fresh[b.SlotIndex(nsTID)] = true
			} else {
				anyFresh = true
			}
		}
	}
	out := make([]Thread, 0, len(reads))
	for _, r := range reads {
		th := Thread{TID: r.TID, Source: catalog.SourceDD}
		switch {
		case !alive[r.TID]:
			st.Exited++
			th.Reason = ReasonExited
		case r.Err == nil && (anyFresh || fresh[b.SlotIndex(r.SlotTID)]):
			st.Collisions++
			if r.Slot.IsZero() {
				st.Empty--
			} else {
				st.Records--
			}
			th.Reason, th.Err = ReasonCollision, fmt.Errorf("%w: a thread started in slot %d during the read", ddotel.ErrCollision, b.SlotIndex(r.SlotTID))
		case r.Err != nil:
			th.Reason, th.Err = ddReason(r.Err), r.Err
		case r.Slot.IsZero():
			th.Reason = ReasonEmptySlot
		default:
			rec := r.Slot.Record()
			th.Record = &rec
		}
		out = append(out, th)
	}
	return out, st, nil
}

func ddReason(err error) string {
	switch {
	case errors.Is(err, ddotel.ErrInProgress):
		return ReasonInProgress
	case errors.Is(err, ddotel.ErrTorn):
		return ReasonTorn
	case errors.Is(err, ddotel.ErrCollision):
		return ReasonCollision
	case errors.Is(err, ddotel.ErrStaleOwner):
		return ReasonStaleOwner
	}
	return ReasonNotInBuffer
}

// Merge combines, per thread, what the OTEP 4947 snapshot (otep) and the
// DD_OTEL_CTX read (dd) of one process found. An OTEP 4947 record wins: it
// is the OpenTelemetry format, read with the thread stopped, and carries
// flags and attributes; a DD record is used when the thread has no OTEP
// 4947 record. Without a record from either, the entry that says the
// thread could not be read is kept (so a caller keeps what it knew) before
// one that says there is no context. Threads are in otep's order, then
// those only dd listed.
func Merge(otep, dd []Thread) []Thread {
	if len(dd) == 0 {
		return otep
	}
	if len(otep) == 0 {
		return dd
	}
	byTID := make(map[int]int, len(dd))
	for i, th := range dd {
		byTID[th.TID] = i
	}
	out := make([]Thread, 0, max(len(otep), len(dd)))
	used := make([]bool, len(dd))
	for _, o := range otep {
		i, ok := byTID[o.TID]
		if !ok {
			out = append(out, o)
			continue
		}
		used[i] = true
		d := dd[i]
		switch {
		case o.Record != nil:
			out = append(out, o)
		case d.Record != nil:
			d.ThreadPointer, d.Stopped = o.ThreadPointer, o.Stopped
			out = append(out, d)
		case !NoContext(o.Reason):
			out = append(out, o)
		case !NoContext(d.Reason):
			out = append(out, d)
		default:
			out = append(out, o)
		}
	}
	for i, d := range dd {
		if !used[i] {
			out = append(out, d)
		}
	}
	return out
}

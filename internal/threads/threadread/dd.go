// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadread

import (
	"errors"
	"fmt"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/pidns"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/ddslots"
	"github.com/otelctx/otelctx/internal/threads/ptrace"
)

const (
	ReasonEmptySlot   = "empty slot"        // the slot is zero: no active context
	ReasonInProgress  = "write in progress" // in_use was 1 at one of the two reads
	ReasonTorn        = "torn"              // the slot changed between the two reads
	ReasonCollision   = "collision"         // another live thread maps to the same slot
	ReasonStaleOwner  = "stale owner"       // the slot still holds an exited thread's value
	ReasonNotInBuffer = "not in buffer"     // the slot could not be read
)

type DDStats struct {
	ddslots.ReadStats
	// Started: threads that appeared during the read; those sharing their slot
	// are reported as collisions.
	Started int
	Exited  int
}

// ReadDD reads the DD_OTEL_CTX slot of every thread of pid without stopping
// any. Threads are listed before and after: a thread that started meanwhile
// may have written a slot it shares with one read (a collision). owners and
// ns (nil: none / one per call) are kept by the caller per process identity.
func ReadDD(procRoot string, pid int, b ddotel.Buffer, owners *ddotel.Owners, ns *pidns.TIDs) ([]Thread, DDStats, error) {
	var st DDStats
	if procRoot == "" {
		procRoot = "/proc"
	}
	if ns == nil {
		ns = pidns.NewTIDs(procRoot, pid)
	}
	before, err := ptrace.ListThreads(procRoot, pid)
	if err != nil {
		return nil, st, err
	}
	reads, rst, err := ddslots.ReadSlots(safemem.New(procRoot, pid), b, before, ddslots.ReadOptions{Owners: owners, ProcRoot: procRoot, NS: ns})
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
	// A newcomer may have written its slot during the read; one whose namespace
	// TID is unreadable exited already, and every slot is suspect.
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
		th := Thread{TID: r.TID, Source: publisher.SourceDD}
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

// Merge prefers an OTEP 4947 record (read stopped, with flags and attributes),
// then a DD one; without either, a read failure before "no context", so a
// caller keeps what it knew. Threads are in otep's order, then dd-only ones.
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

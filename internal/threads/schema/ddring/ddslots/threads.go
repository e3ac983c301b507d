// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddslots

import (
	"errors"
	"fmt"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/pidns"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/ptrace"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// ThreadStats are ReadThreads's counts.
type ThreadStats struct {
	ReadStats
	// Started: threads that appeared during the read; those sharing their slot
	// are reported as collisions.
	Started int
	Exited  int
}

// ReadThreads reads the DD_OTEL_CTX slot of every thread of pid without stopping
// any. Threads are listed before and after: a thread that started meanwhile
// may have written a slot it shares with one read (a collision). owners and
// ns (nil: none / one per call) are kept by the caller per process identity.
func ReadThreads(procRoot string, pid int, b ddotel.Buffer, owners *ddotel.Owners, ns *pidns.TIDs) ([]threadread.Thread, ThreadStats, error) {
	var st ThreadStats
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
	reads, rst, err := ReadSlots(safemem.New(procRoot, pid), b, before, ReadOptions{Owners: owners, ProcRoot: procRoot, NS: ns})
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
	out := make([]threadread.Thread, 0, len(reads))
	for _, r := range reads {
		th := threadread.Thread{TID: r.TID, Source: publisher.SourceDD}
		switch {
		case !alive[r.TID]:
			st.Exited++
			th.Reason = threadread.ReasonExited
		case r.Err == nil && (anyFresh || fresh[b.SlotIndex(r.SlotTID)]):
			st.Collisions++
			if r.Slot.IsZero() {
				st.Empty--
			} else {
				st.Records--
			}
			th.Reason, th.Err = threadread.ReasonCollision, fmt.Errorf("%w: a thread started in slot %d during the read", ddotel.ErrCollision, b.SlotIndex(r.SlotTID))
		case r.Err != nil:
			th.Reason, th.Err = threadReason(r.Err), r.Err
		case r.Slot.IsZero():
			th.Reason = threadread.ReasonEmptySlot
		default:
			rec := r.Slot.Record()
			th.Record = &rec
		}
		out = append(out, th)
	}
	return out, st, nil
}

func threadReason(err error) string {
	switch {
	case errors.Is(err, ddotel.ErrInProgress):
		return threadread.ReasonInProgress
	case errors.Is(err, ddotel.ErrTorn):
		return threadread.ReasonTorn
	case errors.Is(err, ddotel.ErrCollision):
		return threadread.ReasonCollision
	case errors.Is(err, ddotel.ErrStaleOwner):
		return threadread.ReasonStaleOwner
	}
	return threadread.ReasonNotInBuffer
}

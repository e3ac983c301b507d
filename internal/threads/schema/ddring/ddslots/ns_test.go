// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddslots_test

import (
	"errors"
	"testing"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring/ddslots"
)

// TestReadSlotsInPIDNamespace: a writer in its own PID namespace takes its
// slots by the TIDs of that namespace. ReadSlots, given the TIDs listed
// here, reads each thread's slot at its namespace TID (SlotTID) and finds
// collisions among those: a thread whose namespace TID shares worker 0's
// slot collides with it, whatever their TIDs here.
func TestReadSlotsInPIDNamespace(t *testing.T) {
	testenv.RequirePIDNamespace(t)
	w := ddwriter.StartInPIDNamespace(t, ddwriter.Glibc, ddwriter.Options{Threads: 3})
	for i := range w.Threads {
		w.Set(i, 0, 0xc00+uint64(i), 0xd00+uint64(i))
	}
	mate, _ := w.Collide(0)
	b := ddotel.Buffer{Addr: w.Buf, Capacity: w.Capacity}
	reads, st, err := ddslots.ReadSlots(safemem.New("", w.PID), b, w.LiveTIDs(), ddslots.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	by := map[int]ddslots.SlotRead{}
	for _, r := range reads {
		by[r.TID] = r
	}
	for i, wt := range w.Threads {
		r := by[wt.TID]
		if r.SlotTID != wt.NSTID {
			t.Fatalf("worker %d: SlotTID %d, want %d", i, r.SlotTID, wt.NSTID)
		}
		if i == 0 || wt.TID == mate.TID {
			if !errors.Is(r.Err, ddotel.ErrCollision) {
				t.Fatalf("worker %d (namespace tid %d, mate %d, capacity %d): %+v, want a collision", i, wt.NSTID, mate.NSTID, w.Capacity, r)
			}
			continue
		}
		if r.Err != nil || r.Slot != (ddotel.Slot{TraceIDLow: 0xc00 + uint64(i), SpanID: 0xd00 + uint64(i)}) {
			t.Fatalf("worker %d (tid %d here, %d in its namespace, capacity %d): %+v; stats %+v", i, wt.TID, wt.NSTID, w.Capacity, r, st)
		}
	}
	if r := by[w.PID]; r.Err != nil || !r.Slot.IsZero() || r.SlotTID != 1 {
		t.Fatalf("main thread: %+v", r)
	}
	if st.Records != 2 || st.Collisions != 2 {
		t.Fatalf("stats %+v", st)
	}
}

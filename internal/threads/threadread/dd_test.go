// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadread

import (
	"errors"
	"fmt"
	"testing"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/proc/pidns"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestReadDD: every thread of a real writer gets its slot's record (W3C
// ids from high/low and span), an empty slot says so, and threads sharing
// a slot get no record.
func TestReadDD(t *testing.T) {
	testenv.RequireRoot(t)
	for _, libc := range ddwriter.Libcs {
		t.Run(string(libc), func(t *testing.T) {
			const capacity = 64
			w := ddwriter.Start(t, libc, ddwriter.Options{Capacity: capacity, Threads: 2})
			w.Set(0, 0x0102030405060708, 0x090a0b0c0d0e0f10, 0x1112131415161718)
			w.Busy(1) // running while read: the read does not stop it
			w.Set(1, 0, 0xabc, 0x123)
			c, _ := w.Collide(0)
			threads, st, err := ReadDD("", w.PID, ddotel.Buffer{Addr: w.Buf, Capacity: capacity}, ddotel.NewOwners(), nil)
			if err != nil {
				t.Fatal(err)
			}
			by := map[int]Thread{}
			for _, th := range threads {
				if th.Source != publisher.SourceDD {
					t.Fatalf("source %q", th.Source)
				}
				by[th.TID] = th
			}
			if len(by) != 4 {
				t.Fatalf("%d threads: %+v", len(by), threads)
			}
			if th := by[w.Threads[1].TID]; th.Record == nil || th.Record.TraceID.String() != "00000000000000000000000000000abc" || th.Record.SpanID.String() != "0000000000000123" {
				t.Fatalf("worker 1: %+v", th)
			}
			for _, tid := range []int{w.Threads[0].TID, c.TID} {
				if th := by[tid]; th.Record != nil || th.Reason != ReasonCollision || !errors.Is(th.Err, ddotel.ErrCollision) {
					t.Fatalf("tid %d shares a slot: %+v", tid, th)
				}
			}
			// The main thread (never sets a context) may share a slot with
			// a worker if other processes took many PIDs in between.
			tids := make([]int, 0, len(by))
			for tid := range by {
				tids = append(tids, tid)
			}
			colliding := ddotel.Colliding(tids, capacity)
			wantMain := ReasonEmptySlot
			if colliding[w.PID] {
				wantMain = ReasonCollision
			}
			if th := by[w.PID]; th.Record != nil || th.Reason != wantMain {
				t.Fatalf("main thread: %+v", th)
			}
			if st.Records+st.Collisions+st.Empty != 4 || st.Collisions != len(colliding) || st.Calls != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestMerge(t *testing.T) {
	rec := func(b byte) *threadctx.Record { return &threadctx.Record{SpanID: threadctx.SpanID{b}} }
	otep := []Thread{
		{TID: 1, Record: rec(1), Source: publisher.SourceOTEP4947},
		{TID: 2, Reason: ReasonNullPointer, Source: publisher.SourceOTEP4947, ThreadPointer: 0x22},
		{TID: 3, Reason: ReasonTimeout, Source: publisher.SourceOTEP4947},
		{TID: 4, Reason: ReasonNullPointer, Source: publisher.SourceOTEP4947},
		{TID: 5, Reason: ReasonNullPointer, Source: publisher.SourceOTEP4947},
		{TID: 7, Reason: ReasonNullPointer, Source: publisher.SourceOTEP4947},
	}
	dd := []Thread{
		{TID: 1, Record: rec(9), Source: publisher.SourceDD},
		{TID: 2, Record: rec(2), Source: publisher.SourceDD},
		{TID: 3, Reason: ReasonEmptySlot, Source: publisher.SourceDD},
		{TID: 4, Reason: ReasonTorn, Source: publisher.SourceDD},
		{TID: 5, Reason: ReasonEmptySlot, Source: publisher.SourceDD},
		{TID: 6, Record: rec(6), Source: publisher.SourceDD},
	}
	got := Merge(otep, dd)
	want := []struct {
		tid    int
		span   byte // 0: no record
		source string
		reason string
	}{
		{1, 1, publisher.SourceOTEP4947, ""},                // OTEP 4947 wins
		{2, 2, publisher.SourceDD, ""},                      // DD fills in
		{3, 0, publisher.SourceOTEP4947, ReasonTimeout},     // unread beats no context
		{4, 0, publisher.SourceDD, ReasonTorn},              // either way
		{5, 0, publisher.SourceOTEP4947, ReasonNullPointer}, // both none
		{7, 0, publisher.SourceOTEP4947, ReasonNullPointer}, // only one source knows it
		{6, 6, publisher.SourceDD, ""},
	}
	if len(got) != len(want) {
		t.Fatalf("%d threads: %+v", len(got), got)
	}
	for i, w := range want {
		g := got[i]
		span := byte(0)
		if g.Record != nil {
			span = g.Record.SpanID[0]
		}
		if g.TID != w.tid || span != w.span || g.Source != w.source || g.Reason != w.reason {
			t.Errorf("thread %d: %+v, want %+v", i, g, w)
		}
	}
	if got[1].ThreadPointer != 0x22 {
		t.Errorf("the stop's thread pointer is kept: %+v", got[1])
	}
	if len(Merge(nil, dd)) != len(dd) || len(Merge(otep, nil)) != len(otep) {
		t.Error("one source alone")
	}
}

// TestReadDDInPIDNamespace: a writer in its own PID namespace (a
// containerised JVM) indexes its slots with the TIDs of that namespace;
// ReadDD lists the threads with ours and must read each one's slot at its
// namespace TID. The capacity is one at which every thread's slot differs
// between the two TIDs, so a read by our TID never finds the thread's own
// context.
func TestReadDDInPIDNamespace(t *testing.T) {
	testenv.RequirePIDNamespace(t)
	for _, libc := range ddwriter.Libcs {
		t.Run(string(libc), func(t *testing.T) {
			w := ddwriter.StartInPIDNamespace(t, libc, ddwriter.Options{Threads: 3})
			for i := range w.Threads {
				w.Set(i, 0, 0xa00+uint64(i), 0xb00+uint64(i))
			}
			w.Busy(2) // running while read
			ns := pidns.NewTIDs("", w.PID)
			for pass := range 2 { // the second from ns's cache
				threads, st, err := ReadDD("", w.PID, ddotel.Buffer{Addr: w.Buf, Capacity: w.Capacity}, ddotel.NewOwners(), ns)
				if err != nil {
					t.Fatal(err)
				}
				by := map[int]Thread{}
				for _, th := range threads {
					by[th.TID] = th
				}
				for i, wt := range w.Threads {
					th := by[wt.TID]
					want := fmt.Sprintf("%032x/%016x", 0xa00+i, 0xb00+i)
					if th.Record == nil || th.Record.TraceID.String()+"/"+th.Record.SpanID.String() != want {
						t.Fatalf("pass %d: worker %d (tid %d here, %d in its namespace, capacity %d): %+v, want %s; stats %+v",
							pass, i, wt.TID, wt.NSTID, w.Capacity, th, want, st)
					}
				}
				if th := by[w.PID]; th.Record != nil || th.Reason != ReasonEmptySlot {
					t.Fatalf("pass %d: main thread: %+v", pass, th)
				}
				if st.Records != 3 || st.Collisions != 0 {
					t.Fatalf("pass %d: stats %+v", pass, st)
				}
			}
			if ns.SameNamespace() || ns.Len() != 4 {
				t.Fatalf("NSTIDs: same namespace %v, %d threads remembered", ns.SameNamespace(), ns.Len())
			}
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddslots_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/pidns"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring/ddslots"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// TestReadThreads: every thread of a real writer gets its slot's record (W3C
// ids from high/low and span), an empty slot says so, and threads sharing
// a slot get no record.
func TestReadThreads(t *testing.T) {
	testenv.RequireRoot(t)
	for _, libc := range ddwriter.Libcs {
		t.Run(string(libc), func(t *testing.T) {
			const capacity = 64
			w := ddwriter.Start(t, libc, ddwriter.Options{Capacity: capacity, Threads: 2})
			w.Set(0, 0x0102030405060708, 0x090a0b0c0d0e0f10, 0x1112131415161718)
			w.Busy(1) // running while read: the read does not stop it
			w.Set(1, 0, 0xabc, 0x123)
			c, _ := w.Collide(0)
			threads, st, err := ddslots.ReadThreads("", w.PID, ddotel.Buffer{Addr: w.Buf, Capacity: capacity}, ddotel.NewOwners(), nil)
			if err != nil {
				t.Fatal(err)
			}
			by := map[int]threadread.Thread{}
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
				if th := by[tid]; th.Record != nil || th.Reason != threadread.ReasonCollision || !errors.Is(th.Err, ddotel.ErrCollision) {
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
			wantMain := threadread.ReasonEmptySlot
			if colliding[w.PID] {
				wantMain = threadread.ReasonCollision
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

// TestReadThreadsInPIDNamespace: a writer in its own PID namespace (a
// containerised JVM) indexes its slots with the TIDs of that namespace;
// ReadThreads lists the threads with ours and must read each one's slot at its
// namespace TID. The capacity is one at which every thread's slot differs
// between the two TIDs, so a read by our TID never finds the thread's own
// context.
func TestReadThreadsInPIDNamespace(t *testing.T) {
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
				threads, st, err := ddslots.ReadThreads("", w.PID, ddotel.Buffer{Addr: w.Buf, Capacity: w.Capacity}, ddotel.NewOwners(), ns)
				if err != nil {
					t.Fatal(err)
				}
				by := map[int]threadread.Thread{}
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
				if th := by[w.PID]; th.Record != nil || th.Reason != threadread.ReasonEmptySlot {
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

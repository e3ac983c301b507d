// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddwriter_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LongLived...) }

// TestLayout: the writer's buffer is laid out as seed 001 describes, seen
// from another process: header, then each worker's slot at tid % capacity.
func TestLayout(t *testing.T) {
	testenv.RequireRoot(t)
	for _, libc := range ddwriter.Libcs {
		t.Run(string(libc), func(t *testing.T) {
			w := ddwriter.Start(t, libc, ddwriter.Options{Capacity: 16, Threads: 2})
			mem := remote.Memory{PID: w.PID}
			hb := make([]byte, ddotel.HeaderSize)
			if err := mem.ReadAt(hb, w.Buf); err != nil {
				t.Fatal(err)
			}
			h, err := ddotel.ParseHeader(hb, ddotel.BufferSize(16))
			if err != nil || h.Capacity != 16 || w.Capacity != 16 || len(w.Threads) != 2 {
				t.Fatalf("header %+v, %v; writer %+v", h, err, w)
			}
			w.Set(1, 0, 0xabc, 0x123)
			buf := ddotel.Buffer{Addr: w.Buf, Capacity: h.Capacity}
			sb := make([]byte, ddotel.SlotSize)
			if err := mem.ReadAt(sb, buf.SlotAddr(w.Threads[1].TID)); err != nil {
				t.Fatal(err)
			}
			s, busy, err := ddotel.ParseSlot(sb)
			if err != nil || busy || s != (ddotel.Slot{TraceIDLow: 0xabc, SpanID: 0x123}) {
				t.Fatalf("slot %+v busy=%v %v", s, busy, err)
			}
			// A storm leaves every worker's slot with a self-checking value.
			w.Storm()
			if n := w.Calm(); n == 0 {
				t.Fatal("storm wrote nothing")
			}
			for _, th := range w.Threads {
				if err := mem.ReadAt(sb, buf.SlotAddr(th.TID)); err != nil {
					t.Fatal(err)
				}
				if s, busy, _ := ddotel.ParseSlot(sb); busy || !ddwriter.StormOK(th.TID, s) {
					t.Fatalf("worker %d after the storm: %+v busy=%v", th.Index, s, busy)
				}
			}
			c, tries := w.Collide(0)
			if c.TID%16 != w.Threads[0].TID%16 || c.TID == w.Threads[0].TID {
				t.Fatalf("collide: %+v vs %+v (%d tries)", c, w.Threads[0], tries)
			}
			w.Quit()
		})
	}
}

// TestPIDNamespace: a writer started in its own PID namespace is PID 1
// there; each worker's TID here and there are told apart, the one there
// being what indexes its slot (read at NSTID % capacity, not TID %
// capacity).
func TestPIDNamespace(t *testing.T) {
	testenv.RequirePIDNamespace(t)
	w := ddwriter.StartInPIDNamespace(t, ddwriter.Glibc, ddwriter.Options{Threads: 2})
	if w.NSPID != 1 || !w.SlotsMoved() {
		t.Fatalf("writer %+v", w)
	}
	mem := remote.Memory{PID: w.PID}
	for i, th := range w.Threads {
		if th.NSTID != i+2 || th.TID == th.NSTID || w.HostTID(th.NSTID) != th.TID {
			t.Fatalf("worker %d: %+v", i, th)
		}
		w.Set(i, 0, 0x40+uint64(i), 0x50+uint64(i))
		b := ddotel.Buffer{Addr: w.Buf, Capacity: w.Capacity}
		sb := make([]byte, ddotel.SlotSize)
		if err := mem.ReadAt(sb, b.SlotAddr(th.NSTID)); err != nil {
			t.Fatal(err)
		}
		if s, inUse, err := ddotel.ParseSlot(sb); err != nil || inUse || s.TraceIDLow != 0x40+uint64(i) || s.SpanID != 0x50+uint64(i) {
			t.Fatalf("worker %d's slot at its namespace TID: %+v %v", i, s, err)
		}
	}
}

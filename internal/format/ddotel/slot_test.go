// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddotel_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/otelctx/otelctx/internal/format/ddotel"
)

// slot builds a 32-byte slot as the writer lays it out.
func slot(hi, lo, span uint64, inUse byte) []byte {
	b := make([]byte, ddotel.SlotSize)
	binary.NativeEndian.PutUint64(b, hi)
	binary.NativeEndian.PutUint64(b[8:], lo)
	binary.NativeEndian.PutUint64(b[16:], span)
	b[ddotel.OffInUse] = inUse
	b[ddotel.OffInUse+1] = 0xAA // padding is ignored
	return b
}

func TestParseSlot(t *testing.T) {
	s, busy, err := ddotel.ParseSlot(slot(1, 2, 3, 0))
	if err != nil || busy || s != (ddotel.Slot{TraceIDHigh: 1, TraceIDLow: 2, SpanID: 3}) {
		t.Fatalf("ParseSlot = %+v, %v, %v", s, busy, err)
	}
	if _, busy, _ := ddotel.ParseSlot(slot(1, 2, 3, 1)); !busy {
		t.Fatal("in_use=1 not reported")
	}
	if _, _, err := ddotel.ParseSlot(make([]byte, 31)); !errors.Is(err, ddotel.ErrShort) {
		t.Fatalf("short slot: %v", err)
	}
}

func TestConsistent(t *testing.T) {
	a := slot(0, 0xabc, 0x123, 0)
	for _, tc := range []struct {
		name          string
		first, second []byte
		want          error
	}{
		{"stable", a, slot(0, 0xabc, 0x123, 0), nil},
		{"busy_first", slot(0, 0xabc, 0x123, 1), a, ddotel.ErrInProgress},
		{"busy_second", a, slot(0, 0xabc, 0x123, 1), ddotel.ErrInProgress},
		{"changed", a, slot(0, 0xabc, 0x124, 0), ddotel.ErrTorn},
		{"changed_high", a, slot(1, 0xabc, 0x123, 0), ddotel.ErrTorn},
		{"short", a[:20], a, ddotel.ErrShort},
	} {
		s, err := ddotel.Consistent(tc.first, tc.second)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: Consistent = %+v, %v; want %v", tc.name, s, err, tc.want)
		}
	}
}

func TestRecord(t *testing.T) {
	r := ddotel.Slot{TraceIDHigh: 0x0102030405060708, TraceIDLow: 0x090a0b0c0d0e0f10, SpanID: 0x1112131415161718}.Record()
	if got := r.TraceID.String(); got != "0102030405060708090a0b0c0d0e0f10" {
		t.Errorf("trace id %s", got)
	}
	if got := r.SpanID.String(); got != "1112131415161718" {
		t.Errorf("span id %s", got)
	}
	if r.TraceFlags != 0 || r.Attrs != nil {
		t.Errorf("flags/attrs %+v", r)
	}
	// trace_id_high is often 0 (64-bit Datadog trace ids).
	r = ddotel.Slot{TraceIDLow: 0xabc, SpanID: 0x123}.Record()
	if r.TraceID.String() != "00000000000000000000000000000abc" || r.SpanID.String() != "0000000000000123" {
		t.Errorf("64-bit trace id: %s %s", r.TraceID, r.SpanID)
	}
	for _, s := range []ddotel.Slot{{}, {TraceIDLow: 1}, {SpanID: 1}} {
		if r := s.Record(); !r.TraceID.IsZero() || !r.SpanID.IsZero() || !s.IsZero() {
			t.Errorf("%+v: record %+v, want none", s, r)
		}
	}
}

func TestColliding(t *testing.T) {
	got := ddotel.Colliding([]int{100, 116, 101, 102, 132, 103, 103}, 16)
	want := map[int]bool{100: true, 116: true, 132: true}
	if len(got) != len(want) {
		t.Fatalf("Colliding = %v, want %v", got, want)
	}
	for tid := range want {
		if !got[tid] {
			t.Fatalf("Colliding = %v, want %v", got, want)
		}
	}
	if got := ddotel.Colliding([]int{1, 2}, 0); !got[1] || !got[2] {
		t.Fatalf("zero capacity: %v", got)
	}
	if got := ddotel.Colliding(nil, 16); len(got) != 0 {
		t.Fatalf("no tids: %v", got)
	}
}

func TestCollidingNS(t *testing.T) {
	// Listed 100..103, namespace TIDs 1..3 and 9: 1 and 9 share slot 1 of 8;
	// by the listed TIDs (100 and 108 would) nothing would collide.
	ns := map[int]int{100: 1, 101: 2, 102: 3, 103: 9}
	got := ddotel.CollidingNS([]int{100, 101, 102, 103, 103, 104}, ns, 8)
	if len(got) != 2 || !got[100] || !got[103] {
		t.Fatalf("CollidingNS = %v", got)
	}
	if got := ddotel.CollidingNS([]int{100, 101}, ns, 0); !got[100] || !got[101] {
		t.Fatalf("capacity 0: %v", got)
	}
}

func TestOwners(t *testing.T) {
	o := ddotel.NewOwners()
	a, b := ddotel.Slot{TraceIDLow: 1, SpanID: 2}, ddotel.Slot{TraceIDLow: 3, SpanID: 4}
	steps := []struct {
		tid  int
		s    ddotel.Slot
		want bool
	}{
		{10, a, true},  // first seen: nothing to compare with
		{10, a, true},  // same owner
		{18, a, false}, // new owner, old value: not its own
		{18, a, false}, // still not
		{18, b, true},  // it wrote
		{26, ddotel.Slot{}, true},
		{34, ddotel.Slot{}, true},
	}
	for i, s := range steps {
		if got := o.Check(2, s.tid, s.s); got != s.want {
			t.Fatalf("step %d: check(%d, %+v) = %v", i, s.tid, s.s, got)
		}
	}
}

// Prune forgets the slots of threads not live only past 4× the live
// threads + 1024 slots, and keeps the live threads' slots: their guard
// still holds.
func TestOwnersPrune(t *testing.T) {
	o := ddotel.NewOwners()
	s := ddotel.Slot{TraceIDLow: 1, SpanID: 2}
	const gone = 4*1 + 1024 // threads read once (one is live): at the bound
	for tid := 1; tid <= gone; tid++ {
		o.Check(uint32(tid), tid, s)
	}
	live := map[int]bool{1: true}
	o.Prune(live)
	if o.Len() != gone {
		t.Fatalf("at the bound: %d slots kept, want %d", o.Len(), gone)
	}
	o.Check(gone+1, gone+1, s) // one past it
	o.Prune(live)
	if o.Len() != 1 {
		t.Fatalf("past the bound: %d slots kept, want 1 (the live thread's)", o.Len())
	}
	// The live thread's slot still guards a newcomer.
	if o.Check(1, 1+64, s) {
		t.Fatal("after Prune, a new owner of the live thread's slot showing its value was accepted")
	}
}

// TestOwnersTIDReuse: a thread that left a listing and whose TID comes back
// (another thread) does not own the slot's value.
func TestOwnersTIDReuse(t *testing.T) {
	o := ddotel.NewOwners()
	old := ddotel.Slot{TraceIDLow: 0x1111, SpanID: 1}
	if !o.Check(5, 1234, old) {
		t.Fatal("first read refused")
	}
	o.Prune(map[int]bool{99: true}) // 1234 exited
	o.Prune(map[int]bool{99: true, 1234: true})
	if o.Check(5, 1234, old) {
		t.Fatal("a reused TID was given its predecessor's value")
	}
	if !o.Check(5, 1234, ddotel.Slot{TraceIDLow: 0x2222, SpanID: 2}) {
		t.Fatal("the new thread's own write refused")
	}
}

// TestOwnersCollisionSurvivor: after two live threads shared a slot, the
// survivor does not own what the other wrote before exiting, until it
// writes once more.
func TestOwnersCollisionSurvivor(t *testing.T) {
	o := ddotel.NewOwners()
	y := ddotel.Slot{TraceIDLow: 0xaaaa, SpanID: 1}
	x := ddotel.Slot{TraceIDLow: 0xbbbb, SpanID: 2}
	z := ddotel.Slot{TraceIDLow: 0xaaaa, SpanID: 3}
	if !o.Check(3, 10, y) { // A alone
		t.Fatal("first read refused")
	}
	o.Contest(3) // B started in the same slot and wrote x; both refused
	o.Prune(map[int]bool{10: true})
	if o.Check(3, 10, x) { // B exited: A reads B's x
		t.Fatal("the survivor of a collision was given the other thread's value")
	}
	if o.Check(3, 10, x) {
		t.Fatal("still not its own")
	}
	if !o.Check(3, 10, z) {
		t.Fatal("the survivor's own write refused")
	}
	// An empty read (a fault in the kernel) leaves the value: a new thread
	// showing z is not its owner.
	o.Check(3, 10, ddotel.Slot{})
	o.Prune(map[int]bool{11: true})
	if o.Check(3, 11, z) {
		t.Fatal("after an empty read, a new owner was given the old value")
	}
}

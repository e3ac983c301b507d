// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddslots_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring/ddslots"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LongLived...) }

// TestStorm: while every worker rewrites its slot as fast as it can,
// otelctx reads the slots many times without stopping the threads. Every
// slot accepted must be one whole write of that very thread (StormOK); the
// torn and in-progress reads skipped are counted.
func TestStorm(t *testing.T) {
	testenv.RequireRoot(t)
	for _, libc := range ddwriter.Libcs {
		t.Run(string(libc), func(t *testing.T) {
			// Two workers and the reader on two cores: enough to race, and
			// short (it stops once enough reads raced a write), because
			// other packages' tests stop threads with ptrace meanwhile.
			w := ddwriter.Start(t, libc, ddwriter.Options{Threads: 2})
			b := ddotel.Buffer{Addr: w.Buf, Capacity: w.Capacity}
			mem := safemem.New("", w.PID)
			tids := w.LiveTIDs()
			workers := map[int]bool{}
			for _, th := range w.Threads {
				workers[th.TID] = true
			}
			start := w.Storm()
			var total ddslots.ReadStats
			// What a reader checking in_use in one copy of the slot only
			// would accept, for comparison: single reads with in_use 0,
			// and how many of them fail the self-check (torn).
			single := make([]byte, ddotel.SlotSize)
			var singleAccepted, singleTorn int
			const minSkipped, maxRounds = 200, 2_000_000
			deadline := time.Now().Add(20 * time.Second)
			rounds := 0
			for ; rounds < maxRounds && time.Now().Before(deadline); rounds++ {
				reads, st, err := ddslots.ReadSlots(mem, b, tids, ddslots.ReadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range reads {
					// A zero slot (before a worker's first write) is "no
					// context", not a record.
					if r.Err != nil || !workers[r.TID] || r.Slot.IsZero() {
						continue
					}
					if !ddwriter.StormOK(r.TID, r.Slot) {
						t.Fatalf("round %d: accepted a slot no write of tid %d produced: %+v", rounds, r.TID, r.Slot)
					}
				}
				for _, th := range w.Threads {
					if err := mem.ReadAt(single, b.SlotAddr(th.TID)); err != nil {
						t.Fatal(err)
					}
					if s, busy, _ := ddotel.ParseSlot(single); !busy && !s.IsZero() {
						singleAccepted++
						if !ddwriter.StormOK(th.TID, s) {
							singleTorn++
						}
					}
				}
				total.Records += st.Records
				total.InProgress += st.InProgress
				total.Torn += st.Torn
				total.Collisions += st.Collisions
				// Enough reads raced a write to show they are caught.
				if rounds >= 20000 && total.InProgress+total.Torn >= minSkipped {
					rounds++
					break
				}
			}
			writes := w.Calm() - start
			t.Logf("%s: %d rounds over %d workers during %d writes: %d accepted (all self-consistent), %d skipped in progress, %d skipped torn (changed between the two reads), 0 torn accepted",
				libc, rounds, len(w.Threads), writes, total.Records, total.InProgress, total.Torn)
			t.Logf("%s: for comparison, single reads with in_use 0: %d, of which %d torn", libc, singleAccepted, singleTorn)
			if total.Records == 0 || writes == 0 {
				t.Fatalf("nothing exercised: %d accepted, %d writes", total.Records, writes)
			}
			if total.InProgress+total.Torn == 0 {
				t.Errorf("no read raced a write in %d rounds: the storm did not exercise the torn-read checks", rounds)
			}
			if total.Collisions != 0 {
				t.Errorf("%d collisions with capacity %d", total.Collisions, w.Capacity)
			}
		})
	}
}

// TestCollisions: with a small capacity, threads sharing a slot are not
// attributed (either could have written it) and the others are.
func TestCollisions(t *testing.T) {
	testenv.RequireRoot(t)
	const capacity = 8
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: capacity, Threads: 3})
	c, tries := w.Collide(0)
	t.Logf("worker %d (tid %d) shares worker 0's slot (tid %d) after %d thread starts", c.Index, c.TID, w.Threads[0].TID, tries)
	for _, th := range w.Threads {
		w.Set(th.Index, 0, uint64(0x1000+th.Index), uint64(0x2000+th.TID))
	}
	tids := w.LiveTIDs()
	want := ddotel.Colliding(tids, capacity)
	if !want[c.TID] || !want[w.Threads[0].TID] {
		t.Fatalf("Colliding(%v) = %v", tids, want)
	}
	reads, st, err := ddslots.ReadSlots(safemem.New("", w.PID), ddotel.Buffer{Addr: w.Buf, Capacity: capacity}, tids, ddslots.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	attributed := 0
	for _, th := range w.Threads {
		i := slices.IndexFunc(reads, func(r ddslots.SlotRead) bool { return r.TID == th.TID })
		if i < 0 {
			t.Fatalf("tid %d not read", th.TID)
		}
		r := reads[i]
		if want[th.TID] {
			if !errors.Is(r.Err, ddotel.ErrCollision) {
				t.Errorf("worker %d (tid %d, slot %d) shares its slot, but read %+v", th.Index, th.TID, th.TID%capacity, r)
			}
			continue
		}
		if r.Err != nil || r.Slot != (ddotel.Slot{TraceIDLow: uint64(0x1000 + th.Index), SpanID: uint64(0x2000 + th.TID)}) {
			t.Errorf("worker %d (tid %d) alone in its slot, read %+v", th.Index, th.TID, r)
		}
		attributed++
	}
	t.Logf("%d live threads, capacity %d: %d collisions not attributed, %d workers attributed, %d empty", len(tids), capacity, st.Collisions, attributed, st.Empty)
	if st.Collisions != len(want) || attributed == 0 {
		t.Fatalf("stats %+v, want %d collisions and some attributed", st, len(want))
	}
}

// TestStaleOwner: a thread that takes over the slot of an exited thread is
// not given the exited thread's context until it writes its own.
func TestStaleOwner(t *testing.T) {
	testenv.RequireRoot(t)
	const capacity = 8
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: capacity, Threads: 1})
	mem, b, owners := safemem.New("", w.PID), ddotel.Buffer{Addr: w.Buf, Capacity: capacity}, ddotel.NewOwners()
	read := func(tid int) ddslots.SlotRead {
		t.Helper()
		reads, _, err := ddslots.ReadSlots(mem, b, w.LiveTIDs(), ddslots.ReadOptions{Owners: owners})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reads {
			if r.TID == tid {
				return r
			}
		}
		t.Fatalf("tid %d not read", tid)
		return ddslots.SlotRead{}
	}
	old := w.Threads[0]
	w.Set(0, 0, 0xa, 0xb)
	if r := read(old.TID); r.Err != nil || r.Slot.SpanID != 0xb {
		t.Fatalf("first owner: %+v", r)
	}
	heir, _ := w.Collide(0)
	if r := read(heir.TID); !errors.Is(r.Err, ddotel.ErrCollision) {
		t.Fatalf("both live: %+v", r)
	}
	w.Exit(0)
	if r := read(heir.TID); !errors.Is(r.Err, ddotel.ErrStaleOwner) {
		t.Fatalf("heir before writing: %+v, want the exited thread's value refused", r)
	}
	if r := read(heir.TID); !errors.Is(r.Err, ddotel.ErrStaleOwner) {
		t.Fatalf("heir before writing, second read: %+v", r)
	}
	w.Set(heir.Index, 0, 0xc, 0xd)
	if r := read(heir.TID); r.Err != nil || r.Slot.SpanID != 0xd {
		t.Fatalf("heir after writing: %+v", r)
	}
}

// TestUnwrittenPage: a slot on a page the writer never touched is an empty
// slot, not read: the page stays out of the target's page tables.
func TestUnwrittenPage(t *testing.T) {
	testenv.RequireRoot(t)
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Threads: 1}) // 65536 slots, 513 pages
	w.Set(0, 0, 0xabc, 0x123)
	b := ddotel.Buffer{Addr: w.Buf, Capacity: w.Capacity}
	tid := w.Threads[0].TID
	far := tid + 4096 // 128 KiB further in the buffer: a page nobody wrote
	if b.SlotAddr(far)/4096 == b.SlotAddr(tid)/4096 || b.SlotAddr(far)/4096 == w.Buf/4096 {
		t.Fatalf("slots %#x and %#x on one page", b.SlotAddr(tid), b.SlotAddr(far))
	}
	present := func(addr uint64) bool {
		t.Helper()
		f, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", w.PID))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var e [8]byte
		if _, err := f.ReadAt(e[:], int64(addr/4096*8)); err != nil {
			t.Fatal(err)
		}
		return e[7]&0x80 != 0
	}
	if present(b.SlotAddr(far)) {
		testenv.Missing(t, "the far slot's page is resident already (transparent huge pages?): an unwritten page cannot be shown here")
	}
	reads, st, err := ddslots.ReadSlots(safemem.New("", w.PID), b, []int{tid, far}, ddslots.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if reads[0].Err != nil || reads[0].Slot.SpanID != 0x123 || reads[1].Err != nil || !reads[1].Slot.IsZero() {
		t.Fatalf("reads %+v", reads)
	}
	if st.Unwritten != 1 || st.Empty != 1 || st.Records != 1 || st.Calls != 1 {
		t.Fatalf("stats %+v", st)
	}
	if present(b.SlotAddr(far)) {
		t.Fatal("the unwritten page was faulted into the target")
	}
}

// TestReadSlotsHeaderChanged: the header is read with the slots; once it no
// longer describes the buffer (an exec keeps the PID and its start time, and
// the new image may hold anything at the old address), no slot is read.
func TestReadSlotsHeaderChanged(t *testing.T) {
	testenv.RequireRoot(t)
	const capacity = 8
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: capacity, Threads: 1})
	mem, b := safemem.New("", w.PID), ddotel.Buffer{Addr: w.Buf, Capacity: capacity}
	w.Set(0, 0, 0xa, 0xb)
	if _, _, err := ddslots.ReadSlots(mem, b, w.LiveTIDs(), ddslots.ReadOptions{}); err != nil {
		t.Fatalf("intact buffer: %v", err)
	}
	w.Header(0x4F54454C, 1, capacity*2, 32) // another buffer's header now
	reads, _, err := ddslots.ReadSlots(mem, b, w.LiveTIDs(), ddslots.ReadOptions{})
	if !errors.Is(err, ddotel.ErrHeaderGone) || reads != nil {
		t.Fatalf("changed header: %v, %d reads; want ErrHeaderGone and none", err, len(reads))
	}
}

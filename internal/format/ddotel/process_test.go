// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddotel_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/procmaps"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDiscover: the buffer of a real writer is found among the process's
// anonymous mappings: by name where prctl naming works, else (this
// machine) by its magic.
func TestDiscover(t *testing.T) {
	testenv.RequireRoot(t)
	for _, libc := range ddwriter.Libcs {
		t.Run(string(libc), func(t *testing.T) {
			for _, capacity := range []int{16, 65536, 100000} {
				w := ddwriter.Start(t, libc, ddwriter.Options{Capacity: capacity, Threads: 1})
				b, st, err := ddotel.Discover("/proc", safemem.New("", w.PID))
				if err != nil {
					t.Fatalf("capacity %d: %v (%+v)", capacity, err, st)
				}
				wantName := ""
				if w.Named {
					wantName = ddotel.NamedMapping
				}
				if b.Addr != w.Buf || b.Capacity != uint32(capacity) || b.MappingName != wantName || st.Valid != 1 {
					t.Fatalf("capacity %d: found %+v (%+v), writer buf %#x named %v", capacity, b, st, w.Buf, w.Named)
				}
				if st.Reads > 3 {
					t.Errorf("capacity %d: %d process_vm_readv calls for %d candidates", capacity, st.Reads, st.Candidates)
				}
				t.Logf("capacity %d: %d candidate mappings, %d reads, %d pagemap entries, %d pages probed inside mappings, named %v",
					capacity, st.Candidates, st.Reads, st.PagemapEntries, st.InsideProbes, w.Named)
				if err := ddotel.Revalidate(safemem.New("", w.PID), b); err != nil {
					t.Fatalf("revalidate: %v", err)
				}
				w.Quit()
			}
		})
	}
}

// TestDiscoverHostile: a header that lies is refused with its reason, the
// refusal costs the same bounded reads, and nothing is sized from it.
func TestDiscoverHostile(t *testing.T) {
	testenv.RequireRoot(t)
	for _, libc := range ddwriter.Libcs {
		t.Run(string(libc), func(t *testing.T) { testDiscoverHostile(t, libc) })
	}
}

func testDiscoverHostile(t *testing.T, libc ddwriter.Libc) {
	w := ddwriter.Start(t, libc, ddwriter.Options{Capacity: 16, Threads: 1})
	good, _, err := ddotel.Discover("/proc", safemem.New("", w.PID))
	if err != nil {
		t.Fatal(err)
	}
	// The mapping the buffer is in may be larger than its own mmap (merged
	// with a neighbour): one slot more than fits up to its end.
	ms, err := procmaps.FindAnonymous("/proc", w.PID, "", func(m procmaps.Mapping) bool { return m.Start <= w.Buf && w.Buf < m.End })
	if err != nil || len(ms) != 1 {
		t.Fatalf("mapping of %#x: %v %v", w.Buf, ms, err)
	}
	beyond := uint32((ms[0].End-w.Buf)/ddotel.SlotSize) + 1
	for _, tc := range []struct {
		name                               string
		magic, version, capacity, slotSize uint32
		want                               error
	}{
		{"huge_capacity", ddotel.Magic, 1, 0xffffffff, 32, ddotel.ErrBadCapacity},
		{"capacity_beyond_mapping", ddotel.Magic, 1, beyond, 32, ddotel.ErrBadCapacity},
		{"zero_capacity", ddotel.Magic, 1, 0, 32, ddotel.ErrBadCapacity},
		{"bad_version", ddotel.Magic, 2, 16, 32, ddotel.ErrBadVersion},
		{"slot_size_64", ddotel.Magic, 1, 16, 64, ddotel.ErrBadSlotSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.Header(tc.magic, tc.version, tc.capacity, tc.slotSize)
			b, st, err := ddotel.Discover("/proc", safemem.New("", w.PID))
			if !errors.Is(err, ddotel.ErrNotFound) || !errors.Is(err, tc.want) || st.Refused != 1 || st.Valid != 0 {
				t.Fatalf("Discover = %+v, %+v, %v; want not found because %v", b, st, err, tc.want)
			}
			if st.Reads > 3 || st.InsideProbes > ddotel.MaxInsideProbes {
				t.Errorf("%d reads, %d probes", st.Reads, st.InsideProbes)
			}
			// A buffer found before is dropped on its next check.
			if err := ddotel.Revalidate(safemem.New("", w.PID), good); !errors.Is(err, tc.want) {
				t.Fatalf("Revalidate: %v, want %v", err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}
	w.Header(ddotel.Magic, 1, 16, 32)
	if _, _, err := ddotel.Discover("/proc", safemem.New("", w.PID)); err != nil {
		t.Fatalf("restored header: %v", err)
	}
}

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
			var total ddotel.ReadStats
			// What a reader checking in_use in one copy of the slot only
			// would accept, for comparison: single reads with in_use 0,
			// and how many of them fail the self-check (torn).
			single := make([]byte, ddotel.SlotSize)
			var singleAccepted, singleTorn int
			const minSkipped, maxRounds = 200, 2_000_000
			deadline := time.Now().Add(20 * time.Second)
			rounds := 0
			for ; rounds < maxRounds && time.Now().Before(deadline); rounds++ {
				reads, st, err := ddotel.ReadSlots(mem, b, tids, ddotel.ReadOptions{})
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
	reads, st, err := ddotel.ReadSlots(safemem.New("", w.PID), ddotel.Buffer{Addr: w.Buf, Capacity: capacity}, tids, ddotel.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	attributed := 0
	for _, th := range w.Threads {
		i := slices.IndexFunc(reads, func(r ddotel.SlotRead) bool { return r.TID == th.TID })
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
	read := func(tid int) ddotel.SlotRead {
		t.Helper()
		reads, _, err := ddotel.ReadSlots(mem, b, w.LiveTIDs(), ddotel.ReadOptions{Owners: owners})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reads {
			if r.TID == tid {
				return r
			}
		}
		t.Fatalf("tid %d not read", tid)
		return ddotel.SlotRead{}
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

// TestDiscoverNamed: where prctl naming works, the mapping is found by its
// name first, whatever else starts with the magic. Naming does not work on
// this project's machines, so a procfs fixture names the real writer's
// buffer mapping and lists a decoy before it; the memory read is the
// writer's.
func TestDiscoverNamed(t *testing.T) {
	testenv.RequireRoot(t)
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 16, Threads: 1})
	ms, err := procmaps.FindAnonymous("/proc", w.PID, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(w.PID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, m := range ms {
		name := ""
		if m.Start <= w.Buf && w.Buf < m.End {
			// The named mapping is the buffer's own mmap.
			m.Start, m.End, name = w.Buf, w.Buf+4096, ddotel.NamedMapping
		}
		lines = append(lines, fmt.Sprintf("%x-%x rw-p 00000000 00:00 0 %s", m.Start, m.End, name))
	}
	lines = append(lines, fmt.Sprintf("%x-%x r-xp 00000000 fd:01 42 /usr/lib/jvm/lib/server/libjvm.so", 0x1000, 0x2000))
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Residency is the writer's own.
	if err := os.Symlink(fmt.Sprintf("/proc/%d/pagemap", w.PID), filepath.Join(dir, "pagemap")); err != nil {
		t.Fatal(err)
	}
	b, st, err := ddotel.Discover(root, safemem.New(root, w.PID))
	if err != nil || b.Addr != w.Buf || b.MappingName != ddotel.NamedMapping || b.Capacity != 16 {
		t.Fatalf("Discover = %+v, %+v, %v", b, st, err)
	}
	// A named mapping with a bad header is refused like any other.
	w.Header(ddotel.Magic, 1, 16, 64)
	if _, _, err := ddotel.Discover(root, safemem.New(root, w.PID)); !errors.Is(err, ddotel.ErrBadSlotSize) {
		t.Fatalf("named, bad slot size: %v", err)
	}
	w.Header(0, 0, 0, 0)
	if _, st, err := ddotel.Discover(root, safemem.New(root, w.PID)); !errors.Is(err, ddotel.ErrBadMagic) || st.Refused != 1 {
		t.Fatalf("named, no magic: %+v %v", st, err)
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
	reads, st, err := ddotel.ReadSlots(safemem.New("", w.PID), b, []int{tid, far}, ddotel.ReadOptions{})
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
	if _, _, err := ddotel.ReadSlots(mem, b, w.LiveTIDs(), ddotel.ReadOptions{}); err != nil {
		t.Fatalf("intact buffer: %v", err)
	}
	w.Header(0x4F54454C, 1, capacity*2, 32) // another buffer's header now
	reads, _, err := ddotel.ReadSlots(mem, b, w.LiveTIDs(), ddotel.ReadOptions{})
	if !errors.Is(err, ddotel.ErrHeaderGone) || reads != nil {
		t.Fatalf("changed header: %v, %d reads; want ErrHeaderGone and none", err, len(reads))
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddotel

import (
	"errors"
	"fmt"
	"os"

	"github.com/otelctx/otelctx/internal/proc/pagemap"
)

// Memory is how ddotel reads another process's memory: in the collector a
// *safemem.Memory, which reads a range only where the read cannot block on
// a file system (anonymous memory, or pages in the page tables); the
// buffer's address and the slots' are the process's choice. ReadEach reads
// bufs[i] at addrs[i] and sets ok[i] for the ranges read; its error means
// nothing more can be read. PageEntries returns n pagemap entries from
// addr's page (which pages the process wrote), which then also serve the
// reads' own check.
type Memory interface {
	PID() int
	ReadAt(p []byte, addr uint64) error
	ReadEach(bufs [][]byte, addrs []uint64, ok []bool) (calls int, err error)
	PageEntries(addr uint64, n int) ([]pagemap.Entry, error)
}

var (
	ErrCollision = errors.New("dd_otel_ctx: slot shared with another live thread")
	// ErrStaleOwner: the slot still holds a gone thread's value (see Owners).
	ErrStaleOwner = errors.New("dd_otel_ctx: slot still holds a previous thread's value")
	ErrUnreadable = errors.New("dd_otel_ctx: slot not readable")
)

// SlotRead: a zero Slot with a nil Err means no context.
type SlotRead struct {
	// TID is as listed; SlotTID indexes the slot (0 with ErrNoNSTID).
	TID, SlotTID int
	Slot         Slot
	Err          error
}

type ReadOptions struct {
	// Owners (nil: none) refuses slots a new thread has not written yet.
	Owners   *Owners
	ProcRoot string
	// NS (nil: one per call): keep one per process identity.
	NS *NSTIDs
}

type ReadStats struct {
	Calls int
	// Unwritten slots are not read and count as Empty too.
	Unwritten                                       int
	Records, Empty                                  int
	InProgress, Torn, Collisions, Stale, Unreadable int
}

func (s *ReadStats) count(r SlotRead) {
	switch {
	case r.Err == errUnwritten:
		// counted by dropUnwritten
	case r.Err == nil && r.Slot.IsZero():
		s.Empty++
	case r.Err == nil:
		s.Records++
	case errors.Is(r.Err, ErrInProgress):
		s.InProgress++
	case errors.Is(r.Err, ErrTorn):
		s.Torn++
	case errors.Is(r.Err, ErrCollision):
		s.Collisions++
	case errors.Is(r.Err, ErrStaleOwner):
		s.Stale++
	default:
		s.Unreadable++
	}
}

// ReadSlots reads the slots of tids, all the process's live threads (for
// the collision check), without stopping them: each slot is read twice in
// one call and only accepted by Consistent. Shared slots and never-written
// pages (reading them would fault pages into the target) are not read.
func ReadSlots(mem Memory, b Buffer, tids []int, opt ReadOptions) ([]SlotRead, ReadStats, error) {
	var st ReadStats
	owners := opt.Owners
	if b.Capacity == 0 {
		return nil, st, fmt.Errorf("%w: 0 slots", ErrBadCapacity)
	}
	ns := opt.NS
	if ns == nil {
		ns = NewNSTIDs(opt.ProcRoot, mem.PID())
	}
	out, read, seen := classify(mem.PID(), b, tids, ns, owners)
	read, err := dropUnwritten(mem, b, out, read, &st)
	if err != nil {
		return nil, st, err
	}
	bufs, addrs, ok, err := readHeaderAndSlots(mem, b, out, read, &st)
	if err != nil {
		return nil, st, err
	}
	for k, i := range read {
		r := &out[i]
		if !ok[2*k] || !ok[2*k+1] {
			r.Err = fmt.Errorf("%w: slot %d at %#x", ErrUnreadable, b.SlotIndex(r.SlotTID), addrs[2*k])
			continue
		}
		r.Slot, r.Err = Consistent(bufs[2*k], bufs[2*k+1])
		if r.Err == nil && owners != nil && !owners.Check(b.SlotIndex(r.SlotTID), r.TID, r.Slot) {
			r.Slot, r.Err = Slot{}, ErrStaleOwner
		}
	}
	for i := range out {
		st.count(out[i])
		if out[i].Err == errUnwritten {
			out[i].Err = nil // never written: no context
		}
	}
	st.Empty += st.Unwritten
	if owners != nil {
		owners.Prune(seen)
	}
	ns.Prune(seen)
	return out, st, nil
}

// classify fails at once the threads without a namespace TID or sharing a
// slot; read indexes the others in out.
func classify(pid int, b Buffer, tids []int, ns *NSTIDs, owners *Owners) (out []SlotRead, read []int, seen map[int]bool) {
	nsTIDs := ns.Map(tids)
	colliding := CollidingNS(tids, nsTIDs, b.Capacity)
	out = make([]SlotRead, 0, len(tids))
	seen = make(map[int]bool, len(tids))
	for _, tid := range tids {
		if seen[tid] {
			continue
		}
		seen[tid] = true
		r := SlotRead{TID: tid, SlotTID: nsTIDs[tid]}
		switch {
		case r.SlotTID == 0:
			r.Err = fmt.Errorf("%w: thread %d of %d", ErrNoNSTID, tid, pid)
		case colliding[tid]:
			r.Err = fmt.Errorf("%w (slot %d)", ErrCollision, b.SlotIndex(r.SlotTID))
			if owners != nil {
				owners.Contest(b.SlotIndex(r.SlotTID))
			}
		default:
			read = append(read, len(out))
		}
		out = append(out, r)
	}
	return out, read, seen
}

// readHeaderAndSlots reads each slot twice after the header: an exec keeps
// PID, start time and pidfd, so slots are only trusted while the header holds.
func readHeaderAndSlots(mem Memory, b Buffer, out []SlotRead, read []int, st *ReadStats) (bufs [][]byte, addrs []uint64, ok []bool, err error) {
	const hdr = 1
	raw := make([]byte, IdentSize+2*SlotSize*len(read))
	bufs = make([][]byte, hdr+2*len(read))
	addrs = make([]uint64, hdr+2*len(read))
	bufs[0], addrs[0] = raw[:IdentSize], b.Addr
	slots := raw[IdentSize:]
	for k, i := range read {
		a := b.SlotAddr(out[i].SlotTID)
		bufs[hdr+2*k], addrs[hdr+2*k] = slots[2*k*SlotSize:(2*k+1)*SlotSize], a
		bufs[hdr+2*k+1], addrs[hdr+2*k+1] = slots[(2*k+1)*SlotSize:(2*k+2)*SlotSize], a
	}
	ok = make([]bool, len(bufs))
	if len(read) > 0 {
		calls, err := mem.ReadEach(bufs, addrs, ok)
		st.Calls = calls
		if err != nil {
			return nil, nil, nil, err
		}
		if !ok[0] {
			return nil, nil, nil, fmt.Errorf("%w: header at %#x unreadable", ErrHeaderGone, b.Addr)
		}
		if h, err := ParseHeader(bufs[0], BufferSize(b.Capacity)); err != nil || h.Capacity != b.Capacity {
			return nil, nil, nil, fmt.Errorf("%w: header at %#x no longer the buffer's (%v)", ErrHeaderGone, b.Addr, err)
		}
	}
	return bufs[hdr:], addrs[hdr:], ok[hdr:], nil
}

var errUnwritten = errors.New("slot page never written")

// dropUnwritten leaves an empty slot to threads whose slot page was never
// written, with one pagemap read.
func dropUnwritten(mem Memory, b Buffer, out []SlotRead, read []int, st *ReadStats) ([]int, error) {
	if len(read) == 0 {
		return read, nil
	}
	page := uint64(os.Getpagesize())
	lo, hi := b.Addr, b.Addr+IdentSize-1 // the header is read with the slots
	for _, i := range read {
		a := b.SlotAddr(out[i].SlotTID)
		lo, hi = min(lo, a), max(hi, a+SlotSize-1)
	}
	first := lo / page
	ents, err := mem.PageEntries(lo, int(hi/page-first+1))
	if err != nil {
		return nil, err
	}
	if !ents[b.Addr/page-first].Written() {
		return nil, fmt.Errorf("%w: at %#x", ErrHeaderGone, b.Addr)
	}
	kept := read[:0]
	for _, i := range read {
		a := b.SlotAddr(out[i].SlotTID)
		if ents[a/page-first].Written() && ents[(a+SlotSize-1)/page-first].Written() {
			kept = append(kept, i)
			continue
		}
		out[i].Err = errUnwritten
		st.Unwritten++
	}
	return kept, nil
}

// Owners remembers per slot the thread last read there and its value, to
// refuse a value a new owner has not written yet (README.md, stale owner).
type Owners struct {
	slots map[uint32]owner
}

// goneTID owns a slot whose thread left a listing or that was shared.
const goneTID = -1

type owner struct {
	tid  int
	slot Slot
	// stale: refused until the value changes.
	stale     bool
	contested bool
}

// NewOwners: one per buffer and process identity.
func NewOwners() *Owners { return &Owners{slots: map[uint32]owner{}} }

// Check records that tid read s in slot idx; false while s is the previous
// owner's value. Exported for the eBPF path, which reads slots without
// ReadSlots. Not safe for concurrent use.
func (o *Owners) Check(idx uint32, tid int, s Slot) bool {
	prev, known := o.slots[idx]
	if s.IsZero() {
		// An empty slot (a swapped page reads empty in the kernel) must not
		// replace the value, or the next owner would seem to have written it.
		if !known {
			o.slots[idx] = owner{tid: tid}
		}
		return true
	}
	cur := owner{tid: tid, slot: s}
	switch {
	case !known:
	case prev.contested:
		cur.stale = true
	case prev.tid == tid:
		cur.stale = prev.stale && prev.slot == s
	default:
		cur.stale = prev.slot == s
	}
	o.slots[idx] = cur
	return !cur.stale
}

// Contest: after a collision the slot may hold any of the threads' values.
func (o *Owners) Contest(idx uint32) {
	w := o.slots[idx]
	w.tid, w.contested = goneTID, true
	o.slots[idx] = w
}

// Prune drops owners missing from live (a TID that comes back is another
// thread); past a bound, ownerless slots are forgotten rather than grow.
func (o *Owners) Prune(live map[int]bool) {
	for idx, w := range o.slots {
		if w.tid != goneTID && !live[w.tid] {
			w.tid = goneTID
			o.slots[idx] = w
		}
	}
	if len(o.slots) <= 4*len(live)+1024 {
		return
	}
	for idx, w := range o.slots {
		if w.tid == goneTID {
			delete(o.slots, idx)
		}
	}
}

func (o *Owners) Len() int { return len(o.slots) }

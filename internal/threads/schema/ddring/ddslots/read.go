// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package ddslots reads the slots of a DD_OTEL_CTX buffer (found by
// internal/scan/ddscan) for a process's threads without stopping them:
// each at its thread's TID in the process's PID namespace
// (internal/proc/pidns), read twice in one call and accepted only by
// ddotel.Consistent; shared slots, slots a new owner has not written yet
// (ddotel.Owners) and never-written pages are not read.
package ddslots

import (
	"errors"
	"fmt"
	"os"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/pagemap"
	"github.com/otelctx/otelctx/internal/proc/pidns"
)

// Memory is how ddslots reads another process's memory: in the collector a
// *safemem.Memory, which reads a range only where the read cannot block on
// a file system (anonymous memory, or pages in the page tables); the
// buffer's address and the slots' are the process's choice. ReadEach reads
// bufs[i] at addrs[i] and sets ok[i] for the ranges read; its error means
// nothing more can be read. PageEntries returns n pagemap entries from
// addr's page (which pages the process wrote), which then also serve the
// reads' own check.
type Memory interface {
	PID() int
	ReadEach(bufs [][]byte, addrs []uint64, ok []bool) (calls int, err error)
	PageEntries(addr uint64, n int) ([]pagemap.Entry, error)
}

// ErrUnreadable: the slot's range could not be read.
var ErrUnreadable = errors.New("dd_otel_ctx: slot not readable")

// SlotRead: a zero Slot with a nil Err means no context.
type SlotRead struct {
	// TID is as listed; SlotTID indexes the slot (0 with pidns.ErrNoNSTID).
	TID, SlotTID int
	Slot         ddotel.Slot
	Err          error
}

type ReadOptions struct {
	// Owners (nil: none) refuses slots a new thread has not written yet.
	Owners   *ddotel.Owners
	ProcRoot string
	// NS (nil: one per call): keep one per process identity.
	NS *pidns.TIDs
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
	case errors.Is(r.Err, ddotel.ErrInProgress):
		s.InProgress++
	case errors.Is(r.Err, ddotel.ErrTorn):
		s.Torn++
	case errors.Is(r.Err, ddotel.ErrCollision):
		s.Collisions++
	case errors.Is(r.Err, ddotel.ErrStaleOwner):
		s.Stale++
	default:
		s.Unreadable++
	}
}

// ReadSlots reads the slots of tids, all the process's live threads (for
// the collision check), without stopping them: each slot is read twice in
// one call and only accepted by Consistent. Shared slots and never-written
// pages (reading them would fault pages into the target) are not read.
func ReadSlots(mem Memory, b ddotel.Buffer, tids []int, opt ReadOptions) ([]SlotRead, ReadStats, error) {
	var st ReadStats
	owners := opt.Owners
	if b.Capacity == 0 {
		return nil, st, fmt.Errorf("%w: 0 slots", ddotel.ErrBadCapacity)
	}
	ns := opt.NS
	if ns == nil {
		ns = pidns.NewTIDs(opt.ProcRoot, mem.PID())
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
		r.Slot, r.Err = ddotel.Consistent(bufs[2*k], bufs[2*k+1])
		if r.Err == nil && owners != nil && !owners.Check(b.SlotIndex(r.SlotTID), r.TID, r.Slot) {
			r.Slot, r.Err = ddotel.Slot{}, ddotel.ErrStaleOwner
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
func classify(pid int, b ddotel.Buffer, tids []int, ns *pidns.TIDs, owners *ddotel.Owners) (out []SlotRead, read []int, seen map[int]bool) {
	nsTIDs := ns.Map(tids)
	colliding := ddotel.CollidingNS(tids, nsTIDs, b.Capacity)
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
			r.Err = fmt.Errorf("%w: thread %d of %d", pidns.ErrNoNSTID, tid, pid)
		case colliding[tid]:
			r.Err = fmt.Errorf("%w (slot %d)", ddotel.ErrCollision, b.SlotIndex(r.SlotTID))
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
func readHeaderAndSlots(mem Memory, b ddotel.Buffer, out []SlotRead, read []int, st *ReadStats) (bufs [][]byte, addrs []uint64, ok []bool, err error) {
	const hdr = 1
	raw := make([]byte, ddotel.IdentSize+2*ddotel.SlotSize*len(read))
	bufs = make([][]byte, hdr+2*len(read))
	addrs = make([]uint64, hdr+2*len(read))
	bufs[0], addrs[0] = raw[:ddotel.IdentSize], b.Addr
	slots := raw[ddotel.IdentSize:]
	for k, i := range read {
		a := b.SlotAddr(out[i].SlotTID)
		bufs[hdr+2*k], addrs[hdr+2*k] = slots[2*k*ddotel.SlotSize:(2*k+1)*ddotel.SlotSize], a
		bufs[hdr+2*k+1], addrs[hdr+2*k+1] = slots[(2*k+1)*ddotel.SlotSize:(2*k+2)*ddotel.SlotSize], a
	}
	ok = make([]bool, len(bufs))
	if len(read) > 0 {
		calls, err := mem.ReadEach(bufs, addrs, ok)
		st.Calls = calls
		if err != nil {
			return nil, nil, nil, err
		}
		if !ok[0] {
			return nil, nil, nil, fmt.Errorf("%w: header at %#x unreadable", ddotel.ErrHeaderGone, b.Addr)
		}
		if h, err := ddotel.ParseHeader(bufs[0], ddotel.BufferSize(b.Capacity)); err != nil || h.Capacity != b.Capacity {
			return nil, nil, nil, fmt.Errorf("%w: header at %#x no longer the buffer's (%v)", ddotel.ErrHeaderGone, b.Addr, err)
		}
	}
	return bufs[hdr:], addrs[hdr:], ok[hdr:], nil
}

var errUnwritten = errors.New("slot page never written")

// dropUnwritten leaves an empty slot to threads whose slot page was never
// written, with one pagemap read.
func dropUnwritten(mem Memory, b ddotel.Buffer, out []SlotRead, read []int, st *ReadStats) ([]int, error) {
	if len(read) == 0 {
		return read, nil
	}
	page := uint64(os.Getpagesize())
	lo, hi := b.Addr, b.Addr+ddotel.IdentSize-1 // the header is read with the slots
	for _, i := range read {
		a := b.SlotAddr(out[i].SlotTID)
		lo, hi = min(lo, a), max(hi, a+ddotel.SlotSize-1)
	}
	first := lo / page
	ents, err := mem.PageEntries(lo, int(hi/page-first+1))
	if err != nil {
		return nil, err
	}
	if !ents[b.Addr/page-first].Written() {
		return nil, fmt.Errorf("%w: at %#x", ddotel.ErrHeaderGone, b.Addr)
	}
	kept := read[:0]
	for _, i := range read {
		a := b.SlotAddr(out[i].SlotTID)
		if ents[a/page-first].Written() && ents[(a+ddotel.SlotSize-1)/page-first].Written() {
			kept = append(kept, i)
			continue
		}
		out[i].Err = errUnwritten
		st.Unwritten++
	}
	return kept, nil
}

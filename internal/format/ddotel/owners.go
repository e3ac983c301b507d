// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddotel

import "errors"

// ErrStaleOwner: the slot still holds a gone thread's value (see Owners).
var ErrStaleOwner = errors.New("dd_otel_ctx: slot still holds a previous thread's value")

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
// owner's value. Both slot readers (the eBPF samples, the ptrace path's
// ReadSlots) call it. Not safe for concurrent use.
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

package ddotel

import (
	"errors"
	"fmt"

	"github.com/otelctx/otelctx/internal/scan/remote"
)

// More reasons a thread's slot is not attributed to it.
var (
	// ErrCollision: another live thread of the process maps to the same
	// slot, so the slot holds whichever of them wrote last.
	ErrCollision = errors.New("dd_otel_ctx: slot shared with another live thread")
	// ErrStaleOwner: the slot still holds, byte for byte, the value last
	// read there for a thread that has since gone: the thread now owning
	// the slot has not written it yet (see Owners).
	ErrStaleOwner = errors.New("dd_otel_ctx: slot still holds a previous thread's value")
	// ErrUnreadable: the slot could not be read (the mapping went away).
	ErrUnreadable = errors.New("dd_otel_ctx: slot not readable")
)

// SlotRead is the outcome for one thread: Slot when Err is nil (a zero
// slot means the thread has no context), else why it is not attributed.
type SlotRead struct {
	// TID is the thread as listed (the reader's PID namespace), SlotTID
	// its TID in the process's PID namespace, the one its slot is indexed
	// by (0 when it could not be found: Err wraps ErrNoNSTID).
	TID, SlotTID int
	Slot         Slot
	Err          error
}

// ReadOptions are the optional parts of ReadSlots.
type ReadOptions struct {
	// Owners (nil: none) holds what earlier reads of this process's buffer
	// saw, to refuse a slot a new thread has not written yet (see Owners);
	// it is updated with this read.
	Owners *Owners
	// ProcRoot is the procfs mount for /proc/PID/pagemap and the threads'
	// status ("" = "/proc").
	ProcRoot string
	// NS (nil: one made for the call) translates the listed TIDs into the
	// process's PID namespace, where the writer took them (see NSTIDs).
	// Keep one per process identity to look each thread up once.
	NS *NSTIDs
}

// ReadStats count the outcomes of one ReadSlots call.
type ReadStats struct {
	// Calls is the process_vm_readv calls made.
	Calls int
	// Unwritten counts threads whose slot is on a page the process never
	// wrote: not read, an empty slot (also counted in Empty).
	Unwritten int
	// Records counts slots with a context, Empty slots without one.
	Records, Empty int
	// InProgress, Torn, Collisions, Stale and Unreadable count the threads
	// skipped for each reason.
	InProgress, Torn, Collisions, Stale, Unreadable int
}

func (s *ReadStats) count(r SlotRead) {
	switch {
	case r.Err == errUnwritten:
		// counted in Unwritten (and Empty) by dropUnwritten
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

// ReadSlots reads the slot of each thread in tids, which must be all the
// live threads of the process as listed in /proc/PID/task (collisions are
// computed among them, on the slots of their TIDs in the process's PID
// namespace: opt.NS), without
// stopping any: the in_use protocol is made for concurrent readers. Each
// slot is read twice in a row (both reads in the same process_vm_readv
// call, one call for up to remote.MaxIovecs/2 threads) and only accepted by
// Consistent. Threads sharing a slot are not read at all (ErrCollision),
// nor are slots on pages the process never wrote (an empty slot: most of a
// 65536-slot buffer is never touched, and reading it would fault pages into
// the target; see written). opt.Owners refuses a slot a new thread has not
// written yet (ErrStaleOwner).
func ReadSlots(mem remote.Memory, b Buffer, tids []int, opt ReadOptions) ([]SlotRead, ReadStats, error) {
	var st ReadStats
	owners := opt.Owners
	if b.Capacity == 0 {
		return nil, st, fmt.Errorf("%w: 0 slots", ErrBadCapacity)
	}
	ns := opt.NS
	if ns == nil {
		ns = NewNSTIDs(opt.ProcRoot, mem.PID)
	}
	out, read, seen := classify(mem.PID, b, tids, ns, owners)
	read, err := dropUnwritten(opt.ProcRoot, mem.PID, b, out, read, &st)
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

// classify makes one SlotRead per distinct thread of tids, failed at once
// for a thread without a TID in the PID namespace or sharing its slot, and
// returns the indexes into out of the threads to read and the set of tids.
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

// readHeaderAndSlots reads the slot of each out[read[k]] twice, into
// bufs[2k] and bufs[2k+1] (ok says which reads succeeded). The header is
// read first in the same calls: an exec keeps the PID, the start time and
// the pidfd, and the new image may hold anything at the old buffer's
// address; slots are only read from the buffer the header still describes.
func readHeaderAndSlots(mem remote.Memory, b Buffer, out []SlotRead, read []int, st *ReadStats) (bufs [][]byte, addrs []uint64, ok []bool, err error) {
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

// errUnwritten marks, inside ReadSlots, a slot left unread because its page
// was never written; the caller sees an empty slot.
var errUnwritten = errors.New("slot page never written")

// dropUnwritten removes from read (indexes into out) the threads whose slot
// is on a page the process never wrote, leaving them an empty slot, with one
// read of /proc/PID/pagemap over the pages involved (at most the buffer's).
func dropUnwritten(procRoot string, pid int, b Buffer, out []SlotRead, read []int, st *ReadStats) ([]int, error) {
	if len(read) == 0 {
		return read, nil
	}
	pm, err := openPagemap(procRoot, pid)
	if err != nil {
		return nil, err
	}
	defer pm.Close()
	lo, hi := b.Addr, b.Addr+IdentSize-1 // the header is read with the slots
	for _, i := range read {
		a := b.SlotAddr(out[i].SlotTID)
		lo, hi = min(lo, a), max(hi, a+SlotSize-1)
	}
	first := lo / pm.page
	ents, err := pm.entries(lo, int(hi/pm.page-first+1))
	if err != nil {
		return nil, err
	}
	if !written(ents[b.Addr/pm.page-first]) {
		return nil, fmt.Errorf("%w: at %#x", ErrHeaderGone, b.Addr)
	}
	kept := read[:0]
	for _, i := range read {
		a := b.SlotAddr(out[i].SlotTID)
		if written(ents[a/pm.page-first]) && written(ents[(a+SlotSize-1)/pm.page-first]) {
			kept = append(kept, i)
			continue
		}
		out[i].Err = errUnwritten
		st.Unwritten++
	}
	return kept, nil
}

// Owners remembers, per slot of one buffer, the thread last read there and
// the value it had. A thread's slot is shared over time with the threads
// that had its index before (an exited thread, or a reused TID): until the
// new thread writes, the slot shows the old thread's last context. When the
// slot's owner changed and its value did not, the new owner cannot have
// written it (a write of the same three ids is indistinguishable, and
// refused too: the next write of another span lifts it).
//
// Two cases make the owner unknown although a thread of the same TID reads
// the slot again, and both are handled as a change of owner:
//   - the thread left a listing (Prune): a TID that comes back later is
//     another thread (TIDs are reused), so the slot's last value is not
//     its own;
//   - the slot was shared by live threads (Contest): the survivor of a
//     collision may read what the other wrote before exiting, so it is
//     refused until its value changes once more.
//
// Owners only knows what it saw: a slot first read after its previous owner
// exited, or a TID that exited and came back between two listings, is not
// guarded. Memory is bounded by the live threads of the process.
type Owners struct {
	slots map[uint32]owner
}

// goneTID is the owner of a slot whose thread left a listing or that
// several threads shared: no thread of any TID owns its value.
const goneTID = -1

type owner struct {
	tid  int
	slot Slot
	// stale: tid has owned the slot only while it held the previous
	// owner's value (or the value read first after a collision); it is
	// refused until the value changes.
	stale bool
	// contested: live threads shared the slot since it was last read.
	contested bool
}

// NewOwners returns an empty history (one per buffer and process identity).
func NewOwners() *Owners { return &Owners{slots: map[uint32]owner{}} }

// Check records that tid read s in slot idx and reports whether s may be
// tid's: false while the slot holds the value a previous owner left.
// ReadSlots calls it for every slot it accepts. It is exported for the
// readers that get a slot without ReadSlots: the eBPF sampler reads the
// sampled thread's slot in the kernel, and its callers (the receiver,
// otelctx threads --mode ebpf) apply the same rule to each slot it emits,
// after their collision check. An Owners is not safe for concurrent use.
func (o *Owners) Check(idx uint32, tid int, s Slot) bool {
	prev, known := o.slots[idx]
	if s.IsZero() {
		// An empty slot is nobody's context, and it does not replace the
		// value the slot held: a read that found nothing (a page swapped
		// out reads as empty in the kernel) must not make that value look
		// like the next owner's own write.
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

// Contest records that live threads share slot idx: whatever it holds
// after the collision may be any of theirs (see Owners). Every reader
// calls it for each slot it finds shared.
func (o *Owners) Contest(idx uint32) {
	w := o.slots[idx]
	w.tid, w.contested = goneTID, true
	o.slots[idx] = w
}

// Prune takes live, the process's threads as just listed: a slot whose
// owner is not among them has no owner any more (a TID that comes back is
// another thread). Past a few times their number, ownerless slots are
// forgotten (they only guard against a new thread inheriting them, and a
// process with that much thread churn loses that guard for some slots
// rather than growing without bound). ReadSlots calls it after each read;
// callers of Check call it each time they list the process's threads.
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

// Len is the number of slots remembered.
func (o *Owners) Len() int { return len(o.slots) }

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddslots

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/proc/pidns"
	"github.com/otelctx/otelctx/internal/threads/ptrace"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// Reasons a judged sample says nothing of its thread's context (label
// values of the thread sources' refused counts).
const (
	// ReasonNotResident: the kernel could not read the slot's page.
	ReasonNotResident = "not resident"
	// ReasonUnlisted: the process's threads could not be listed after the
	// sample (the process is gone): nothing vouches for the slot's owner.
	ReasonUnlisted = "unlisted"
)

// errUnlisted details ReasonUnlisted.
var errUnlisted = errors.New("dd_otel_ctx: the process's threads could not be listed after the sample")

// Judgement is what a sample says of its thread: a record, or the reason
// there is none.
type Judgement struct {
	Record *threadctx.Record
	Reason string
	Err    error
}

// Ownership decides whether a DD_OTEL_CTX slot the kernel read for the
// sampled thread is that thread's. The slot is tid % capacity, shared by
// every tid congruent to it, which the kernel cannot know; tid is the
// thread's TID in the process's PID namespace (the writer's gettid()),
// which the kernel indexes with and reports (Sample.SlotTID); the listed
// threads' are found with pidns.TIDs. A sample is judged against the
// two listings of the process's threads (/proc/PID/task) around it: the
// last one started before it was received and the first one started
// after (so after it was taken):
//
//   - a thread sharing its slot with another thread of either listing is a
//     collision (the slot holds whichever wrote last); a thread in neither
//     listing (it lived between them) collides with any listed thread of
//     its slot;
//   - a slot still holding the value its previous owner left is refused
//     (ddotel.Owners: the thread has not written it yet).
//
// A thread that lived and died between the two listings and wrote the
// same slot is not seen, as in a snapshot (ReadThreads).
type Ownership struct {
	procRoot string
	pid      int
	buf      ddotel.Buffer
	owners   *ddotel.Owners
	ns       *pidns.TIDs
	// cur is the last listing, started at listedAt; listOK: it succeeded.
	// listed is it and the one before, colliding those of its threads that
	// share a slot, taken their slots; alive is cur.
	cur       []int
	listedAt  time.Time
	listOK    bool
	listed    map[int]bool
	colliding map[int]bool
	taken     map[uint32]bool
	alive     map[int]bool
}

// NewOwnership lists pid's threads a first time (at now).
func NewOwnership(procRoot string, pid int, b ddotel.Buffer, now time.Time) (*Ownership, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	// A listing that fails but for a gone process (too many threads) leaves
	// the process tracked: its DD samples count as unlisted, its OTEP ones
	// are read as ever.
	tids, err := ptrace.ListThreads(procRoot, pid)
	if errors.Is(err, ptrace.ErrProcessGone) {
		return nil, err
	}
	return &Ownership{procRoot: procRoot, pid: pid, buf: b, owners: ddotel.NewOwners(), ns: pidns.NewTIDs(procRoot, pid),
		cur: tids, listedAt: now, listOK: err == nil}, nil
}

// Relist lists the threads again: every sample received so far was taken
// before this listing.
func (d *Ownership) Relist(now time.Time) {
	d.listedAt = now
	tids, err := ptrace.ListThreads(d.procRoot, d.pid)
	if err != nil {
		d.listOK = false
		return
	}
	prev := d.cur
	d.cur, d.listOK = tids, true
	both := append(slices.Clone(prev), tids...)
	ns := d.ns.Map(both)
	d.colliding = ddotel.CollidingNS(both, ns, d.buf.Capacity)
	for tid := range d.colliding {
		if v, ok := ns[tid]; ok {
			d.owners.Contest(d.buf.SlotIndex(v)) // the slot's next value may be anyone's
		}
	}
	d.listed, d.taken = make(map[int]bool, len(both)), make(map[uint32]bool, len(both))
	for _, tid := range both {
		d.listed[tid] = true
		if v, ok := ns[tid]; ok {
			d.taken[d.buf.SlotIndex(v)] = true
		}
	}
	d.alive = make(map[int]bool, len(tids))
	for _, tid := range tids {
		d.alive[tid] = true
	}
}

// Judge is what a DD sample received before the last relist says of its
// thread. Samples must be judged in the order they were received.
func (d *Ownership) Judge(smp sampler.Sample) Judgement {
	var v Judgement
	idx := d.buf.SlotIndex(smp.SlotTID)
	switch {
	case !d.listOK:
		v.Reason, v.Err = ReasonUnlisted, errUnlisted
	case d.colliding[smp.TID] || (!d.listed[smp.TID] && d.taken[idx]):
		v.Reason, v.Err = threadread.ReasonCollision, fmt.Errorf("%w (slot %d)", ddotel.ErrCollision, idx)
	case smp.SlotNotResident:
		// It says nothing of the slot's owner either: no Owners.Check.
		v.Reason = ReasonNotResident
	case !d.owners.Check(idx, smp.TID, smp.Slot):
		v.Reason, v.Err = threadread.ReasonStaleOwner, ddotel.ErrStaleOwner
	case smp.Slot.IsZero():
		v.Reason = threadread.ReasonEmptySlot
	default:
		rec := smp.Slot.Record()
		v.Record = &rec
	}
	return v
}

// Judged ends a batch of judged samples: the slot history keeps the slots
// of the threads listed last (ddotel.Owners.Prune).
func (d *Ownership) Judged() {
	if !d.listOK {
		return
	}
	d.owners.Prune(d.alive)
	d.ns.Prune(d.listed)
}

// ListedAt is when the threads were last listed.
func (d *Ownership) ListedAt() time.Time { return d.listedAt }

// Listed reports whether tid was in the last listing or the one before.
func (d *Ownership) Listed(tid int) bool { return d.listed[tid] }

// ListOK reports whether the last listing succeeded.
func (d *Ownership) ListOK() bool { return d.listOK }

// SlotsKnown is the number of slots whose last owner is remembered.
func (d *Ownership) SlotsKnown() int { return d.owners.Len() }

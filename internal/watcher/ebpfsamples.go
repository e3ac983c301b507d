package watcher

import (
	"context"
	"errors"
	"os"
	"strconv"
	"time"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/scan/ddotel"
	"github.com/otelctx/otelctx/internal/scan/processctx"
	"github.com/otelctx/otelctx/internal/scan/safemem"
	"github.com/otelctx/otelctx/internal/scan/sampler"
	"github.com/otelctx/otelctx/internal/scan/threadctx"
)

// ddRelist bounds how often a process's threads are listed again because a
// sample came from a thread not in the last list (a process that starts
// threads continuously would otherwise be listed on every sample).
const ddRelist = 20 * time.Millisecond

// ddListAge is the oldest a thread list may be (if the sync interval is
// not shorter): a thread started since, sharing a listed thread's slot,
// goes unnoticed until it is sampled itself, so the list is redone at
// least this often while samples come (one readdir of /proc/PID/task).
const ddListAge = time.Second

// ddState is what the DD path knows of a process's threads: a slot is
// tid % capacity, tid the thread's TID in the process's PID namespace (the
// writer's gettid(); the kernel indexes with it too and reports it as
// Sample.SlotTID), so the kernel's read is only the sampled thread's if no
// other live thread maps to it, and if the thread wrote it since it got it.
type ddState struct {
	// listed is the process's threads (/proc/PID/task) at listedAt, and
	// colliding those of them sharing a slot (ddotel.CollidingNS, on the
	// slots of their namespace TIDs, found with ns: once per thread).
	listed    map[int]bool
	colliding map[int]bool
	listedAt  time.Time
	ns        *ddotel.NSTIDs
	// owners is, per slot index, the thread last attributed there and the
	// value it held (the same guard as the ptrace path's ReadSlots): a new
	// thread in a slot shows its predecessor's value until it writes. Made
	// at the first DD sample.
	owners *ddotel.Owners
	// otep is, in a process read through both sources, the threads whose
	// latest OTEP 4947 sample carried a record: that record wins over the
	// DD slot.
	otep map[int]bool
}

// onSample runs on the sampler's Run goroutine, for every sample.
func (t *samplerReader) onSample(smp sampler.Sample) {
	ctx := context.Background()
	t.stel.samples.Add(ctx, 1)
	if smp.Followed {
		t.stel.followed.Add(ctx, 1)
	}
	t.mu.RLock()
	tp := t.tracked[smp.PID]
	t.mu.RUnlock()
	if tp == nil {
		return // untracked since the kernel took it
	}
	if smp.Source == sampler.SourceDD {
		t.onDDSample(ctx, tp, smp)
		return
	}
	var rec *catalog.ThreadRecord
	if smp.Record != nil {
		parsed, err := threadctx.Parse(smp.Record)
		switch {
		case errors.Is(err, threadctx.ErrInvalid):
			// valid != 1: cleared or being written; no context now.
		case err != nil:
			t.tel.fail(ctx, reasonParse, 1)
			return
		default:
			rec = &catalog.ThreadRecord{PID: smp.PID, TID: smp.TID, SeenAt: smp.Time, Record: parsed,
				Attributes: t.name(tp, parsed), Source: catalog.SourceOTEP4947}
		}
	}
	if tp.dd != nil {
		// Read through both sources: the OTEP 4947 record wins while there
		// is one; once withdrawn (one "no record" observed), the DD slot
		// speaks for the thread.
		had := tp.otep[smp.TID]
		if rec == nil {
			delete(tp.otep, smp.TID)
			if !had {
				return
			}
		} else {
			if tp.otep == nil {
				tp.otep = map[int]bool{}
			}
			tp.otep[smp.TID] = true
		}
	}
	// Under the identity the recipe was made for: if the PID changed hands
	// since, the catalog refuses the sample.
	t.catalog.ObserveFor(tp.proc.ID, smp.TID, smp.Time, rec, smp.Followed)
}

// onDDSample attributes a DD_OTEL_CTX slot the kernel read for the sampled
// thread to it, if the slot can be its own: no other live thread maps to
// the slot, and the thread has written it since it got it.
func (t *samplerReader) onDDSample(ctx context.Context, tp *trackedProc, smp sampler.Sample) {
	if tp.dd == nil {
		return // tracked without its buffer since (the kernel's recipe lagged)
	}
	if smp.DDNotResident {
		// Usually a slot nobody wrote, but also a page swapped out or
		// under NUMA balancing: no observation either way, rather than a
		// "no record" that would cut the thread's run in the catalog.
		return
	}
	if owns, why := t.ddOwns(tp, smp.TID); !owns {
		t.stel.refused(ctx, why, 1)
		return
	}
	if tp.owners == nil {
		tp.owners = ddotel.NewOwners()
	}
	if !tp.owners.Check(tp.dd.SlotIndex(smp.SlotTID), smp.TID, smp.DD) {
		t.stel.refused(ctx, ddSlotStale, 1)
		return
	}
	if tp.loc != nil && tp.otep[smp.TID] {
		return // the thread's OTEP 4947 record wins
	}
	var rec *catalog.ThreadRecord
	if !smp.DD.IsZero() {
		rec = &catalog.ThreadRecord{PID: smp.PID, TID: smp.TID, SeenAt: smp.Time, Record: smp.DD.Record(), Source: catalog.SourceDD}
	}
	t.catalog.ObserveFor(tp.proc.ID, smp.TID, smp.Time, rec, smp.Followed)
}

// ddOwns reports whether tid is a listed thread of the process that shares
// its slot with no other listed thread. The list is redone when it is older
// than the sync interval or ddListAge, or when tid is not in it (a new
// thread; at most every ddRelist): a thread that cannot be listed is not
// trusted.
func (t *samplerReader) ddOwns(tp *trackedProc, tid int) (bool, string) {
	now := time.Now()
	age := now.Sub(tp.listedAt)
	if tp.listed == nil || age >= min(t.syncEvery, ddListAge) || (!tp.listed[tid] && age >= ddRelist) {
		tids, err := listThreads(tp.proc.ID.PID)
		if err != nil {
			return false, ddSlotUnlisted // gone: nothing to attribute
		}
		tp.listedAt = now
		tp.listed = make(map[int]bool, len(tids))
		for _, id := range tids {
			tp.listed[id] = true
		}
		if tp.ns == nil {
			tp.ns = ddotel.NewNSTIDs("", tp.proc.ID.PID)
		}
		nsTIDs := tp.ns.Map(tids)
		tp.colliding = ddotel.CollidingNS(tids, nsTIDs, tp.dd.Capacity)
		if tp.owners == nil {
			tp.owners = ddotel.NewOwners()
		}
		for tid := range tp.colliding {
			// Sampled or not, a thread sharing its slot makes the slot's
			// next value anyone's (ddotel.Owners.Contest).
			if v, ok := nsTIDs[tid]; ok {
				tp.owners.Contest(tp.dd.SlotIndex(v))
			}
		}
		tp.pruneThreads()
	}
	switch {
	case !tp.listed[tid]:
		// Started since the last listing, which is not redone more often
		// than ddRelist: its slot's sharers are not known yet.
		return false, ddSlotUnlisted
	case tp.colliding[tid]:
		return false, ddSlotCollision
	}
	return true, ""
}

// pruneThreads bounds the per-thread maps by the listed threads: entries of
// threads no longer listed go; the slot owners of threads no longer listed
// stay until there are many of them (ddotel.Owners.Prune): they are what
// guards a new thread that takes such a slot.
func (d *ddState) pruneThreads() {
	for tid := range d.otep {
		if !d.listed[tid] {
			delete(d.otep, tid)
		}
	}
	if d.owners != nil {
		d.owners.Prune(d.listed)
	}
	if d.ns != nil {
		d.ns.Prune(d.listed)
	}
}

// listThreads lists /proc/PID/task.
func listThreads(pid int) ([]int, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(names))
	for _, n := range names {
		if tid, err := strconv.Atoi(n); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// name resolves the key indexes; an unknown one makes it re-read the
// process context at its mapping once per context (the map is
// append-only: a newer context may know it; a later update of the context
// brings a new trackedProc and a new chance).
func (t *samplerReader) name(tp *trackedProc, r threadctx.Record) map[string]string {
	named, unknown := r.Named(tp.keyMap)
	if len(unknown) == 0 || tp.refreshed {
		return named
	}
	tp.refreshed = true
	c, _, err := processctx.Read(safemem.New("", tp.proc.ID.PID), tp.proc.MappingAddr, t.limits)
	if err != nil || len(c.ThreadLocal.AttributeKeyMap) <= len(tp.keyMap) {
		return named
	}
	tp.keyMap = c.ThreadLocal.AttributeKeyMap
	named, _ = r.Named(tp.keyMap)
	return named
}

// onPrctl hands a PID that just named a mapping (a process context being
// published or updated) to the poll goroutine, never blocking the sampler.
func (t *samplerReader) onPrctl(pid int) {
	select {
	case t.rescan <- pid:
		t.stel.rescans.Add(context.Background(), 1)
	default:
	}
}

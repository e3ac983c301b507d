package main

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/scan/ddotel"
	"github.com/otelctx/otelctx/internal/scan/ptrace"
	"github.com/otelctx/otelctx/internal/scan/sampler"
	"github.com/otelctx/otelctx/internal/scan/threadread"
)

// errNotPublished marks a process without a process context: it publishes
// no OTEP 4947 thread contexts, which is no news when it has a DD_OTEL_CTX
// buffer.
var errNotPublished = errors.New("no process context")

// notPublished keeps pidError's one-line message and is errNotPublished.
type notPublished struct{ error }

func (notPublished) Is(target error) bool { return target == errNotPublished }

// findDD searches pid for a Datadog DD_OTEL_CTX buffer, whatever its
// executable (the receiver only searches JVMs by default; the CLI is asked
// about one process). --mode ebpf hands the buffer to the sampler
// (sampler.Target.DD).
func (e *env) findDD(pid int) (*ddotel.Buffer, error) {
	b, st, err := ddotel.Discover(e.proc, pid)
	if err != nil {
		return nil, err
	}
	if st.Valid > 1 {
		e.log.Debug(fmt.Sprintf("pid %d: %d DD_OTEL_CTX buffers, using the first at %#x", pid, st.Valid, b.Addr))
	}
	return &b, nil
}

// readDD reads the slots of pid's threads in its DD_OTEL_CTX buffer (one
// read, threads not stopped).
func (e *env) readDD(pid int) ([]threadread.Thread, error) {
	b, err := e.findDD(pid)
	if err != nil {
		return nil, err
	}
	threads, _, err := threadread.ReadDD(e.proc, pid, *b, nil, nil)
	return threads, err
}

// ddAbsent reports whether err only says that no buffer is there (not that
// one was refused or could not be read).
func ddAbsent(err error) bool {
	return errors.Is(err, ddotel.ErrNotFound) && !errors.Is(err, ddotel.ErrBadCapacity) &&
		!errors.Is(err, ddotel.ErrBadVersion) && !errors.Is(err, ddotel.ErrBadSlotSize) && !errors.Is(err, ddotel.ErrBadMagic)
}

// ddNote is what otelctx threads says about the DD_OTEL_CTX search: after
// the OTEP 4947 reason when neither source could be read, or alone when
// only the DD search failed.
func ddNote(err error) string {
	if ddAbsent(err) {
		return "no DD_OTEL_CTX buffer either"
	}
	return "DD_OTEL_CTX: " + oneLine(err.Error())
}

// ddListEvery: while samples come, --mode ebpf lists the threads of a
// process with a DD_OTEL_CTX buffer again at least this often; a sample
// waits (in memory) for the first listing started after it was received.
const ddListEvery = 50 * time.Millisecond

// ddJudge decides, for --mode ebpf, whether a DD_OTEL_CTX slot the kernel
// read for the sampled thread is that thread's, with the rules of the
// snapshot (threadread.ReadDD) and of the receiver's eBPF path: the slot is
// tid % capacity, shared by every tid congruent to it, which the kernel
// cannot know. tid is the thread's TID in the process's PID namespace (the
// writer's gettid()): the kernel indexes with it and reports it
// (Sample.SlotTID); the listed threads' are found with ddotel.NSTIDs (one
// /proc/PID/task/TID/status read per thread, only for a process in another
// PID namespace). Rows stay keyed by the listed TID. A sample is judged against the two listings of the
// process's threads (/proc/PID/task) around it: the last one started before
// it was received, and the first one started after (so after it was
// taken).
//
//   - a thread that shares its slot with another thread of either listing
//     is a collision (ddotel.Colliding: the slot holds whichever wrote
//     last);
//   - a slot still holding the value its previous owner left is refused
//     (ddotel.Owners.Check: the thread has not written it yet).
//
// The sampled thread was running when the kernel read its slot: it need
// not be in a listing itself (one that started and exited between two
// listings is judged like the others). A thread that lived and died
// between the two listings and wrote the same slot is not seen, as in the
// snapshot.
type ddJudge struct {
	procRoot string
	pid      int
	buf      ddotel.Buffer
	owners   *ddotel.Owners
	ns       *ddotel.NSTIDs
	// prev and cur are the last two listings, cur started at listedAt;
	// listed is prev ∪ cur, colliding its threads that share a slot, taken
	// its slots; alive is cur.
	prev, cur []int
	listedAt  time.Time
	listed    map[int]bool
	colliding map[int]bool
	taken     map[uint32]bool
	alive     map[int]bool
}

// newDDJudge lists pid's threads a first time: call it before the kernel
// reads anything.
func newDDJudge(procRoot string, pid int, b ddotel.Buffer) (*ddJudge, error) {
	j := &ddJudge{procRoot: procRoot, pid: pid, buf: b, owners: ddotel.NewOwners(), ns: ddotel.NewNSTIDs(procRoot, pid)}
	j.listedAt = time.Now()
	tids, err := ptrace.ListThreads(procRoot, pid)
	if err != nil {
		return nil, err
	}
	j.cur = tids
	return j, nil
}

// relist lists the threads again: every sample received so far was taken
// before this listing. A process that is gone has no threads left.
func (j *ddJudge) relist() {
	j.listedAt = time.Now()
	tids, err := ptrace.ListThreads(j.procRoot, j.pid)
	if err != nil {
		tids = nil
	}
	j.prev, j.cur = j.cur, tids
	both := append(slices.Clone(j.prev), j.cur...)
	ns := j.ns.Map(both)
	j.colliding = ddotel.CollidingNS(both, ns, j.buf.Capacity)
	for tid := range j.colliding {
		if v, ok := ns[tid]; ok {
			j.owners.Contest(j.buf.SlotIndex(v)) // the slot's next value may be anyone's
		}
	}
	j.listed, j.taken = make(map[int]bool, len(both)), make(map[uint32]bool, len(both))
	for _, tid := range both {
		j.listed[tid] = true
		if v, ok := ns[tid]; ok {
			j.taken[j.buf.SlotIndex(v)] = true
		}
	}
	j.alive = make(map[int]bool, len(tids))
	for _, tid := range tids {
		j.alive[tid] = true
	}
}

// judge turns a DD sample received before the last relist into what the
// thread shows. Samples must be judged in the order they were received.
func (j *ddJudge) judge(smp sampler.Sample) threadread.Thread {
	th := threadread.Thread{TID: smp.TID, Source: catalog.SourceDD}
	idx := j.buf.SlotIndex(smp.SlotTID)
	switch {
	// A thread in neither listing collides with any listed thread of its
	// slot.
	case j.colliding[smp.TID] || (!j.listed[smp.TID] && j.taken[idx]):
		th.Reason, th.Err = threadread.ReasonCollision, fmt.Errorf("%w (slot %d)", ddotel.ErrCollision, idx)
	case smp.DDNotResident:
		// The kernel could not read the slot's page: usually never
		// written (no context); it says nothing of the slot's owner.
		th.Reason = threadread.ReasonEmptySlot
	case !j.owners.Check(idx, smp.TID, smp.DD):
		th.Reason, th.Err = threadread.ReasonStaleOwner, ddotel.ErrStaleOwner
	case smp.DD.IsZero():
		th.Reason = threadread.ReasonEmptySlot
	default:
		rec := smp.DD.Record()
		th.Record = &rec
	}
	return th
}

// judged ends a batch of judged samples: the slot history keeps the slots
// of the threads listed last (ddotel.Owners.Prune).
func (j *ddJudge) judged() {
	j.owners.Prune(j.alive)
	j.ns.Prune(j.listed)
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"slices"
	"sync"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/profiledict"
	"github.com/otelctx/otelctx/internal/publisher"
)

// threadKey names one thread of one process: its history is copied once
// per message, however many ResourceProfiles name it.
type threadKey struct {
	proc publisher.ProcessID
	tid  int64
}

// threadState is what a batch knows of one thread: its runs (a window of
// batch.runs from off) and a cursor over them.
type threadState struct {
	off    int
	cursor catalog.Cursor
}

// runResult caches what a run's record adds to a sample (a record is one
// run of one thread, so no map keyed by record is needed).
type runResult struct {
	res recResult
	// resolved: res holds the record's link and attribute indices.
	resolved bool
}

// slot maps an attribute table index (a thread.id entry) to the state of
// that thread in the current ResourceProfiles: one ResourceProfiles is one
// process, so the entry alone names the thread, and a slice indexed by it
// is cheaper than a map keyed by (pid, tid). gen says which
// ResourceProfiles the slot was filled for.
type slot struct {
	gen   uint32
	state int32
}

// recResult is what one thread record adds to a sample: a link index
// (0: the record has no usable span) and attribute indices, with the key
// string index of each so that a sample's own value of a key is kept.
type recResult struct {
	link        int32
	attrs, keys []int32
}

// attrKey identifies a string attribute in the attribute table.
type attrKey struct {
	key int32
	val string
}

// batch is the per-message state of the profiles path. It is pooled: its
// maps and slices keep their capacity across messages, so that a message
// costs a few allocations, not a few per sample.
type batch struct {
	policy *Policy
	cat    *catalog.Catalog
	// envBudget: the /proc look-ups this message's PIDs may still cost.
	envBudget catalog.EnvBudget

	// dict: the message's dictionary as received, its samples' verdicts
	// and its process.pid / thread.id columns; add: what the join adds.
	dict profiledict.Dict
	add  additions

	threads map[threadKey]int32 // index into states
	slots   []slot              // per attribute table index (as on entry)
	gen     uint32
	states  []threadState
	runs    []catalog.Run // the histories of the threads seen, copied once per thread
	results []runResult   // per run

	split  pidSplit    // scratch for splitByPID
	record recordSplit // scratch for splitByRecord
	// why: per sample of the message's ResourceProfiles to join (in order),
	// why it is invalid (validSample: it is not); plans: one per
	// ResourceProfiles to join; spans: per process, the oldest and newest
	// time of its samples in the message.
	why   []Invalid
	plans []rpPlan
	spans map[publisher.ProcessID][2]int64
	// proc is the identity of the current ResourceProfiles' process.
	proc publisher.ProcessID
	// from and to bound the current ResourceProfiles' sample times (Unix
	// ns): the part of each thread's history that is copied.
	from, to int64

	cnt Counts
}

var batchPool = sync.Pool{New: func() any { return newBatch() }}

func newBatch() *batch {
	return &batch{
		threads: map[threadKey]int32{},
		add: additions{
			sets:    map[*catalog.Attribute]recResult{},
			keyIdx:  map[string]int32{},
			attrIdx: map[attrKey]int32{},
			linkIdx: map[[24]byte]int32{},
		},
		spans: map[publisher.ProcessID][2]int64{},
	}
}

// maxPooledEntries bounds the maps a pooled batch keeps: a map keeps its
// size after clear, so a large message's would make every later clear cost
// as much; larger maps are dropped rather than cleared.
const maxPooledEntries = 1 << 16

// reset readies b for the next message by building it anew: what is not a
// buffer named here is zero, and the buffers are emptied, keeping their
// capacity (and dropping the pdata and records they pointed to).
func (b *batch) reset() {
	if len(b.threads)+len(b.spans)+b.add.size() > maxPooledEntries {
		*b = *newBatch()
		return
	}
	b.dict.Forget()
	*b = batch{
		dict:    b.dict,
		add:     newAdditions(&b.dict, &b.add),
		threads: cleared(b.threads), slots: emptied(b.slots), states: emptied(b.states),
		runs: emptied(b.runs), results: b.results[:0],
		split: b.split.emptied(), record: b.record.emptied(),
		why: b.why[:0], plans: emptied(b.plans), spans: cleared(b.spans),
	}
}

// emptied returns s cleared (its elements may hold pointers, or stamps a
// later message must not match) and of length 0.
func emptied[S ~[]E, E any](s S) S {
	clear(s)
	return s[:0]
}

// cleared returns m emptied.
func cleared[M ~map[K]V, K comparable, V any](m M) M {
	clear(m)
	return m
}

// Profiles joins c onto pd in place: each ResourceProfiles gets its
// process's resource (split first by the processes its samples name, when
// its resource names none), and each sample the link and attributes of the
// record its thread had when it was taken.
func Profiles(c *catalog.Catalog, p *Policy, pd pprofile.Profiles) Counts {
	b := batchPool.Get().(*batch)
	b.policy, b.cat = p, c
	b.envBudget = catalog.NewEnvBudget(catalog.DefaultEnvLookups)
	b.run(pd)
	cnt := b.cnt
	b.reset()
	batchPool.Put(b)
	return cnt
}

func (b *batch) run(pd pprofile.Profiles) {
	b.dict.Reset(pd.Dictionary(), profiledict.Entries)
	b.add = newAdditions(&b.dict, &b.add)
	n := b.dict.AttributeCount()
	b.slots = slices.Grow(b.slots[:0], n)[:n]
	b.split.init(pd, n)

	rps := pd.ResourceProfiles()
	n = rps.Len()
	out := &b.split.outcomes
	for i := range n {
		rp := rps.At(i)
		o, cls, classified := b.splitByPID(rps, rp)
		*out = append(*out, o)
		if o == splitNone {
			b.plan(rp, cls, classified)
		}
	}
	// The copies splitByPID appended.
	for i := n; i < rps.Len(); i++ {
		b.plan(rps.At(i), rpClass{}, false)
	}
	for i := range b.plans {
		b.joinResourceProfiles(&b.plans[i])
	}
	if slices.Contains(*out, splitEmptied) {
		i := 0
		rps.RemoveIf(func(pprofile.ResourceProfiles) bool {
			gone := i < n && (*out)[i] == splitEmptied
			i++
			return gone
		})
	}
}

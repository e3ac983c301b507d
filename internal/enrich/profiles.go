// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"slices"
	"sync"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/catalog"
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

	strs  pcommon.StringSlice
	attrs pprofile.KeyValueAndUnitSlice
	links pprofile.LinkSlice

	// tidOf and pidOf give, per attribute table index (as on entry), the
	// thread.id / process.pid value it holds, or -1.
	tidOf, pidOf []int64
	nPIDs        int // entries with a process.pid
	// keyOf gives, per attribute table index, the entry's key string
	// index (entries this processor adds included).
	keyOf []int32

	threads map[threadKey]int32 // index into states
	slots   []slot              // per attribute table index (as on entry)
	gen     uint32
	states  []threadState
	runs    []catalog.Run // the histories of the threads seen, copied once per thread
	results []runResult   // per run
	arena   []int32       // backing of the recResults' slices
	// sets: a record attribute set (the catalog's shared slice, by its
	// first element) → its indices in this message (link unused).
	sets map[*catalog.Attribute]recResult

	// keyIdx: the text of each attribute key → its string index (the
	// table's keys and those this processor added).
	keyIdx  map[string]int32
	attrIdx map[attrKey]int32
	linkIdx map[[24]byte]int32
	// attrIdxBuilt / linkIdxBuilt: the maps hold the whole table (built on
	// first need, since most messages of a process without spans need none).
	attrIdxBuilt, linkIdxBuilt bool
	// mark: per string index, the stamp (markGen) of the sample whose keys
	// it holds; extra: the attributes a merge adds. addAttributes' scratch.
	mark    []uint32
	markGen uint32
	extra   []int32

	split  pidSplit    // scratch for splitByPID
	record recordSplit // scratch for splitByRecord
	check  sampleCheck // validity of samples' indices
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
		sets:    map[*catalog.Attribute]recResult{},
		keyIdx:  map[string]int32{},
		attrIdx: map[attrKey]int32{},
		linkIdx: map[[24]byte]int32{},
		spans:   map[publisher.ProcessID][2]int64{},
	}
}

// maxPooledEntries bounds the maps a pooled batch keeps: a map keeps its
// size after clear, so a large message's would make every later clear cost
// as much; larger maps are dropped rather than cleared.
const maxPooledEntries = 1 << 16

func (b *batch) reset() {
	if len(b.threads)+len(b.sets)+len(b.keyIdx)+len(b.attrIdx)+len(b.linkIdx)+len(b.spans)+len(b.mark)+len(b.extra) > maxPooledEntries {
		*b = *newBatch()
		return
	}
	b.policy, b.cat = nil, nil
	b.strs, b.attrs, b.links = pcommon.StringSlice{}, pprofile.KeyValueAndUnitSlice{}, pprofile.LinkSlice{}
	b.tidOf, b.pidOf, b.keyOf, b.nPIDs = b.tidOf[:0], b.pidOf[:0], b.keyOf[:0], 0
	clear(b.threads)
	clear(b.slots)
	b.slots = b.slots[:0]
	b.gen = 0
	clear(b.states) // their cursors hold slices of runs
	b.states = b.states[:0]
	clear(b.runs) // drop the record pointers
	b.runs = b.runs[:0]
	b.results = b.results[:0]
	b.arena = b.arena[:0]
	clear(b.sets)
	clear(b.keyIdx)
	clear(b.attrIdx)
	clear(b.linkIdx)
	b.attrIdxBuilt, b.linkIdxBuilt = false, false
	b.extra = b.extra[:0] // mark keeps its stamps: markGen moves on
	b.from, b.to = 0, 0
	b.split.reset()
	b.record.reset()
	b.check.reset()
	b.why = b.why[:0]
	clear(b.plans) // they hold pdata
	b.plans = b.plans[:0]
	clear(b.spans)
	b.cnt = Counts{}
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
	dict := pd.Dictionary()
	b.strs, b.attrs, b.links = dict.StringTable(), dict.AttributeTable(), dict.LinkTable()
	b.indexThreadAndPID()
	b.check.init(dict)
	b.split.init(pd, b.attrs.Len())

	rps := pd.ResourceProfiles()
	n := rps.Len()
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

// indexThreadAndPID finds which attribute table entries are thread.id and
// process.pid, once per message: samples then find theirs by index.
func (b *batch) indexThreadAndPID() {
	tidKey, pidKey := int32(-1), int32(-1)
	for i, s := range b.strs.All() {
		switch s {
		case keyThreadID:
			tidKey = int32(i)
		case keyPID:
			pidKey = int32(i)
		}
	}
	n := b.attrs.Len()
	b.slots = slices.Grow(b.slots[:0], n)[:n]
	b.tidOf = slices.Grow(b.tidOf[:0], n)[:n]
	b.pidOf = slices.Grow(b.pidOf[:0], n)[:n]
	b.keyOf = slices.Grow(b.keyOf[:0], n)[:n]
	for i := range n {
		b.tidOf[i], b.pidOf[i] = -1, -1
		kv := b.attrs.At(i)
		b.keyOf[i] = kv.KeyStrindex()
		switch b.keyOf[i] {
		case tidKey:
			if v, ok := intValue(kv.Value()); ok && v >= 0 {
				b.tidOf[i] = v
			}
		case pidKey:
			if v, ok := intValue(kv.Value()); ok && v > 0 {
				b.pidOf[i] = v
				b.nPIDs++
			}
		}
	}
}

// lookupAttr returns the value (in of) of the first sample attribute that
// has one, and the attribute's index.
func lookupAttr(ai pcommon.Int32Slice, of []int64) (int64, int32) {
	for i := range ai.Len() {
		if idx := ai.At(i); idx > 0 && int(idx) < len(of) && of[idx] >= 0 {
			return of[idx], idx
		}
	}
	return -1, 0
}

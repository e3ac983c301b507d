package ctxenrichprocessor

import (
	"context"
	"slices"
	"sync"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/scan"
)

// threadKey names one thread of one process.
type threadKey struct{ pid, tid int64 }

// run is a catalog observation run in Unix ns: a local copy, so that the
// per-sample search takes no lock and builds no time.Time. It also caches
// what its record adds to a sample: a record is one run of one thread, so
// the run is where its result is looked up (no map keyed by record).
type run struct {
	first, last int64
	// firstExact / lastExact: the observation at first / last was taken at
	// a profiler's sample moment.
	firstExact, lastExact bool
	rec                   *catalog.ThreadRecord
	res                   recResult
	// resolved: res holds the record's link and attribute indices.
	resolved bool
}

// threadState is what a batch knows of one thread: its history (a window
// of batch.runs) and the run the previous sample of the thread fell in
// (samples of a thread come in time order, so it is usually the next
// sample's too).
type threadState struct {
	off, n, cur int
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
	e   *enricher
	cat *catalog.Catalog

	strs  pcommon.StringSlice
	attrs pprofile.KeyValueAndUnitSlice
	links pprofile.LinkSlice

	// tidOf and pidOf give, per attribute table index (as on entry), the
	// thread.id / process.pid value it holds, or -1.
	tidOf, pidOf []int64
	// keyOf gives, per attribute table index, the entry's key string
	// index (entries this processor adds included).
	keyOf []int32

	threads map[threadKey]int32 // index into states
	slots   []slot              // per attribute table index (as on entry)
	gen     uint32
	states  []threadState
	runs    []run
	hist    []catalog.Run // scratch for one thread's history
	arena   []int32       // backing of the recResults' slices
	// sets: a record attribute set (the catalog's shared slice, by its
	// first element) → its indices in this message (link unused).
	sets map[*catalog.Attribute]recResult

	strIdx  map[string]int32 // string table entries looked up so far
	attrIdx map[attrKey]int32
	linkIdx map[[24]byte]int32
	// attrIdxBuilt / linkIdxBuilt: the maps hold the whole table (built on
	// first need, since most messages of a process without spans need none).
	attrIdxBuilt, linkIdxBuilt bool

	pids   []int64 // scratch for the split
	groups []group // scratch for splitByRecord
	// proc is the identity of the current ResourceProfiles' process.
	proc scan.ProcessID
	// from and to bound the current ResourceProfiles' sample times (Unix
	// ns): the part of each thread's history that is copied.
	from, to int64

	cnt counts
}

var batchPool = sync.Pool{New: func() any {
	return &batch{
		threads: map[threadKey]int32{},
		sets:    map[*catalog.Attribute]recResult{},
		strIdx:  map[string]int32{},
		attrIdx: map[attrKey]int32{},
		linkIdx: map[[24]byte]int32{},
	}
}}

func (b *batch) reset() {
	b.e, b.cat = nil, nil
	b.strs, b.attrs, b.links = pcommon.StringSlice{}, pprofile.KeyValueAndUnitSlice{}, pprofile.LinkSlice{}
	b.tidOf, b.pidOf, b.keyOf = b.tidOf[:0], b.pidOf[:0], b.keyOf[:0]
	clear(b.threads)
	clear(b.slots)
	b.slots = b.slots[:0]
	b.gen = 0
	b.states = b.states[:0]
	clear(b.runs) // drop the record pointers
	b.runs = b.runs[:0]
	b.arena = b.arena[:0]
	clear(b.sets)
	clear(b.strIdx)
	clear(b.attrIdx)
	clear(b.linkIdx)
	b.attrIdxBuilt, b.linkIdxBuilt = false, false
	b.from, b.to = 0, 0
	b.pids = b.pids[:0]
	clear(b.groups)
	b.groups = b.groups[:0]
	b.cnt = counts{}
}

func (e *enricher) processProfiles(ctx context.Context, pd pprofile.Profiles) (pprofile.Profiles, error) {
	c := e.cat.Load()
	if c == nil {
		return pd, nil
	}
	b := batchPool.Get().(*batch)
	b.e, b.cat = e, c
	b.run(pd)
	e.tel.record(ctx, "profiles", &b.cnt)
	b.reset()
	batchPool.Put(b)
	return pd, nil
}

func (b *batch) run(pd pprofile.Profiles) {
	dict := pd.Dictionary()
	b.strs, b.attrs, b.links = dict.StringTable(), dict.AttributeTable(), dict.LinkTable()
	b.indexThreadAndPID()

	rps := pd.ResourceProfiles()
	n := rps.Len()
	for i := range n {
		b.splitByPID(rps, rps.At(i))
	}
	// Split-off copies were appended; originals left without samples go.
	rps.RemoveIf(b.emptied)
	for _, rp := range rps.All() {
		b.joinResourceProfiles(rp)
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
			}
		}
	}
}

// lookupIdx returns the value of of the first sample attribute that has one.
func lookupIdx(ai pcommon.Int32Slice, of []int64) int64 {
	v, _ := lookupAttr(ai, of)
	return v
}

// lookupAttr is lookupIdx that also returns the attribute's index.
func lookupAttr(ai pcommon.Int32Slice, of []int64) (int64, int32) {
	for i := range ai.Len() {
		if idx := ai.At(i); idx > 0 && int(idx) < len(of) && of[idx] >= 0 {
			return of[idx], idx
		}
	}
	return -1, 0
}

func countSamples(rp pprofile.ResourceProfiles) int {
	n := 0
	for _, sp := range rp.ScopeProfiles().All() {
		for _, p := range sp.Profiles().All() {
			n += p.Samples().Len()
		}
	}
	return n
}

// emptied marks the originals the split moved every sample out of (an
// input ResourceProfiles that came without samples is passed on as is).
func (b *batch) emptied(rp pprofile.ResourceProfiles) bool {
	v, ok := rp.Resource().Attributes().Get(splitMarker)
	return ok && v.Bool()
}

// splitMarker tags, during one message, an original ResourceProfiles whose
// samples all moved to per-process copies. It never leaves the processor:
// such resources are removed.
const splitMarker = "\x00ctxenrich.split"

// splitByPID makes rp a one-process ResourceProfiles: when its resource has
// no process.pid, the samples' process.pid attributes say whose they are;
// one process: the resource gets its process.pid; several: the samples of
// each move to a copy of rp (resource, scopes, profiles without their
// samples) for that process. Samples keep their dictionary indices: the
// dictionary is shared by the whole message, so they stay valid.
func (b *batch) splitByPID(rps pprofile.ResourceProfilesSlice, rp pprofile.ResourceProfiles) {
	res := rp.Resource().Attributes()
	if _, ok := res.Get(keyPID); ok {
		return
	}
	b.pids = b.pids[:0]
	without := 0
	for _, sp := range rp.ScopeProfiles().All() {
		for _, p := range sp.Profiles().All() {
			for _, s := range p.Samples().All() {
				pid := lookupIdx(s.AttributeIndices(), b.pidOf)
				if pid < 0 {
					without++
				} else if !slices.Contains(b.pids, pid) {
					b.pids = append(b.pids, pid)
				}
			}
		}
	}
	switch {
	case len(b.pids) == 0:
		return
	case len(b.pids) == 1 && without == 0:
		res.PutInt(keyPID, b.pids[0])
		return
	}
	slices.Sort(b.pids) // a deterministic output order
	for _, pid := range b.pids {
		cp := rps.AppendEmpty()
		rp.Resource().CopyTo(cp.Resource())
		cp.SetSchemaUrl(rp.SchemaUrl())
		cp.Resource().Attributes().PutInt(keyPID, pid)
		for _, sp := range rp.ScopeProfiles().All() {
			csp := pprofile.NewScopeProfiles()
			sp.Scope().CopyTo(csp.Scope())
			csp.SetSchemaUrl(sp.SchemaUrl())
			for _, p := range sp.Profiles().All() {
				cprof := pprofile.NewProfile()
				p.CopyTo(cprof)
				cprof.Samples().RemoveIf(func(s pprofile.Sample) bool {
					return lookupIdx(s.AttributeIndices(), b.pidOf) != pid
				})
				if cprof.Samples().Len() > 0 {
					cprof.MoveTo(csp.Profiles().AppendEmpty())
				}
			}
			if csp.Profiles().Len() > 0 {
				csp.MoveTo(cp.ScopeProfiles().AppendEmpty())
			}
		}
	}
	b.cnt.splitCount++
	// What stays is the samples that named no process.
	for _, sp := range rp.ScopeProfiles().All() {
		for _, p := range sp.Profiles().All() {
			p.Samples().RemoveIf(func(s pprofile.Sample) bool {
				return lookupIdx(s.AttributeIndices(), b.pidOf) >= 0
			})
		}
	}
	if without == 0 {
		res.PutBool(splitMarker, true)
	}
}

// joinResourceProfiles merges the process's resource attributes into rp
// and joins its samples with their threads' records.
func (b *batch) joinResourceProfiles(rp pprofile.ResourceProfiles) {
	res := rp.Resource().Attributes()
	nSamples := int64(countSamples(rp))
	v, ok := res.Get(keyPID)
	var pid int64
	if ok {
		pid, ok = intValue(v)
	}
	if !ok {
		b.cnt.noPID++
		b.cnt.unmatched[reasonNoProcess] += nSamples
		return
	}
	// The samples' time span: the PID-reuse guard needs the oldest, and the
	// thread histories are copied for [oldest, newest] only.
	var oldest, newest int64
	for _, sp := range rp.ScopeProfiles().All() {
		for _, p := range sp.Profiles().All() {
			for _, s := range p.Samples().All() {
				for _, t := range s.TimestampsUnixNano().All() {
					oldest, newest = minTime(oldest, int64(t)), max(newest, int64(t))
				}
			}
		}
	}
	p, j := b.e.lookup(b.cat, res, pid, oldest)
	if j == joinOK && newest != oldest {
		// One holder of the PID for every sample, or none of them is joined.
		if q, _ := b.e.lookup(b.cat, res, pid, newest); q != p {
			j = joinPIDReuse
		}
	}
	switch j {
	case joinNoProcess:
		b.cnt.noProcess++
		b.cnt.unmatched[reasonNoProcess] += nSamples
		return
	case joinPIDReuse:
		b.cnt.pidReuse++
		b.cnt.unmatched[reasonPIDReuse] += nSamples
		return
	}
	b.e.merge(res, p)
	b.cnt.joined++
	b.gen++ // a new process: the thread slots of the previous one are void
	// Thread states hold the histories of this window only.
	clear(b.threads)
	// An observation within match_window of a sample may vouch for it.
	w := int64(b.e.cfg.MatchWindow)
	b.from, b.to = oldest-w, newest+w
	b.proc = p.ID
	for _, sp := range rp.ScopeProfiles().All() {
		for _, prof := range sp.Profiles().All() {
			samples := prof.Samples()
			// Samples appended by splitByRecord are joined when made.
			for i := range samples.Len() {
				b.joinSample(pid, samples, i)
			}
		}
	}
}

// joinSample gives sample i the link and attributes of the record its
// thread had when it was taken.
func (b *batch) joinSample(pid int64, samples pprofile.SampleSlice, i int) {
	s := samples.At(i)
	tid, tidAttr := lookupAttr(s.AttributeIndices(), b.tidOf)
	if tid < 0 {
		b.cnt.unmatched[reasonNoThreadID]++
		return
	}
	ts := s.TimestampsUnixNano()
	n := ts.Len()
	if n == 0 {
		b.cnt.unmatched[reasonNoTimestamp]++
		return
	}
	sl := &b.slots[tidAttr]
	if sl.gen != b.gen {
		*sl = slot{gen: b.gen, state: b.thread(pid, tid)}
	}
	st := &b.states[sl.state]
	t0 := int64(ts.At(0))
	ri, why := b.recordAt(st, t0)
	if n > 1 {
		// The profiler aggregates the events of one stack, thread and CPU
		// into one sample with several timestamps; the thread may have
		// changed spans between them.
		for j := 1; j < n; j++ {
			if r, w := b.recordAt(st, int64(ts.At(j))); r != ri || w != why {
				b.splitByRecord(samples, s, st)
				return
			}
		}
	}
	b.apply(s, ri, why)
}

// apply gives s what the record of run ri adds, or counts why there is
// nothing to add.
func (b *batch) apply(s pprofile.Sample, ri int, why reason) {
	if why != reasonNone {
		b.cnt.unmatched[why]++
		return
	}
	ru := &b.runs[ri]
	if !ru.resolved {
		ru.res, ru.resolved = b.result(ru.rec), true
	}
	r := ru.res
	if r.link > 0 && (s.LinkIndex() <= 0 || b.e.cfg.OverrideLinks) {
		s.SetLinkIndex(r.link)
	}
	if len(r.attrs) > 0 {
		b.addAttributes(s.AttributeIndices(), r)
	}
	b.cnt.enriched++
}

// group is a run of a sample's timestamps [start, end) that saw one record.
type group struct {
	start, end int
	run        int // index in batch.runs (-1: none)
	why        reason
}

// splitByRecord splits s, whose timestamps saw several records, into one
// sample per run of timestamps with the same record (the first stays in s,
// the others are appended to samples), and joins each. The values follow
// the timestamps when the split keeps their meaning: none, one per
// timestamp, or one count equal to the number of timestamps; otherwise s
// is left whole and counted ambiguous.
func (b *batch) splitByRecord(samples pprofile.SampleSlice, s pprofile.Sample, st *threadState) {
	ts, vals := s.TimestampsUnixNano(), s.Values()
	n, nv := ts.Len(), vals.Len()
	perTimestamp, count := nv == n, nv == 1 && vals.At(0) == int64(n)
	if nv != 0 && !perTimestamp && !count {
		b.cnt.unmatched[reasonAmbiguous]++
		return
	}
	b.groups = b.groups[:0]
	for j := range n {
		ri, why := b.recordAt(st, int64(ts.At(j)))
		if k := len(b.groups) - 1; k >= 0 && b.groups[k].run == ri && b.groups[k].why == why {
			b.groups[k].end = j + 1
			continue
		}
		b.groups = append(b.groups, group{start: j, end: j + 1, run: ri, why: why})
	}
	origTS, origVals := ts.AsRaw(), vals.AsRaw()
	// Copies first, from the untouched sample (SampleSlice holds pointers:
	// appending does not move s).
	parts := make([]pprofile.Sample, len(b.groups))
	parts[0] = s
	for k := 1; k < len(parts); k++ {
		parts[k] = samples.AppendEmpty()
		s.CopyTo(parts[k])
	}
	for k, g := range b.groups {
		p := parts[k]
		p.TimestampsUnixNano().FromRaw(origTS[g.start:g.end])
		switch {
		case perTimestamp:
			p.Values().FromRaw(origVals[g.start:g.end])
		case count:
			p.Values().FromRaw([]int64{int64(g.end - g.start)})
		}
		b.apply(p, g.run, g.why)
	}
	b.cnt.samplesSplit++
}

// reasonNone: the sample matched.
const reasonNone = numReasons

// recordAt returns the index in b.runs of the run whose record st's thread
// had at t, or -1 and why the catalog cannot vouch for one. It vouches when
// t lies between two observations of the same record (within a run), or
// when an observation taken at a profiler's sample moment (exact) is
// within match_window of t: the nearest such, unless an exact observation
// of another record is less than twice as far (ambiguous). Observations
// that are not exact are on our clock at moments of our choosing: they
// never vouch for a sample outside their run.
func (b *batch) recordAt(st *threadState, t int64) (int, reason) {
	runs := b.runs[st.off : st.off+st.n]
	if len(runs) == 0 {
		return -1, reasonUnknownThread
	}
	i := b.runBefore(st, runs, t)
	if i >= 0 && t <= runs[i].last {
		return b.use(st.off + i)
	}
	best, why := nearestExact(runs, i, t, int64(b.e.cfg.MatchWindow))
	if best < 0 {
		return -1, why
	}
	return b.use(st.off + best)
}

// nearestExact returns the run of the exact observation nearest to t within
// w (i: the last run that started at or before t, -1 if none), or -1 and
// stale (none within w) or ambiguous (one of another record less than twice
// as far).
func nearestExact(runs []run, i int, t, w int64) (int, reason) {
	best, bestD, otherD := -1, int64(0), int64(-1)
	consider := func(j int, d int64) {
		switch {
		case best < 0:
			best, bestD = j, d
		case d < bestD:
			if !catalog.SameContent(runs[j].rec, runs[best].rec) {
				otherD = bestD
			}
			best, bestD = j, d
		case !catalog.SameContent(runs[j].rec, runs[best].rec) && (otherD < 0 || d < otherD):
			otherD = d
		}
	}
	for j := i; j >= 0 && t-runs[j].last <= w; j-- {
		if runs[j].lastExact {
			consider(j, t-runs[j].last)
		}
		if runs[j].firstExact && t-runs[j].first <= w {
			consider(j, t-runs[j].first)
		}
	}
	for j := i + 1; j < len(runs) && runs[j].first-t <= w; j++ {
		if runs[j].firstExact {
			consider(j, runs[j].first-t)
		}
		if runs[j].lastExact && runs[j].last-t <= w {
			consider(j, runs[j].last-t)
		}
	}
	switch {
	case best < 0:
		return -1, reasonStale
	case otherD >= 0 && otherD < 2*bestD:
		return -1, reasonAmbiguous
	}
	return best, reasonNone
}

// runBefore returns the index in runs of the last run that started at or
// before t (-1: none), starting from the previous sample's run: samples of
// a thread come in time order, so it is that run or the next one, else a
// binary search.
func (b *batch) runBefore(st *threadState, runs []run, t int64) int {
	in := func(i int) bool { return runs[i].first <= t && (i+1 == len(runs) || runs[i+1].first > t) }
	i := st.cur
	if in(i) {
		return i
	}
	if i+1 < len(runs) && in(i+1) {
		st.cur = i + 1
		return i + 1
	}
	i, _ = slices.BinarySearchFunc(runs, t, func(r run, t int64) int {
		if r.first <= t {
			return -1
		}
		return 1
	})
	i--
	st.cur = max(i, 0)
	return i
}

// use returns run ri (an index in b.runs) as the sample's record, or no_span
// when the thread had none then.
func (b *batch) use(ri int) (int, reason) {
	if b.runs[ri].rec == nil {
		return -1, reasonNoSpan
	}
	return ri, reasonNone
}

// thread returns the index of the batch's state of a thread, reading its history from
// the catalog the first time: one locked copy per thread and message
// instead of one lookup per sample.
func (b *batch) thread(pid, tid int64) int32 {
	k := threadKey{pid, tid}
	if i, ok := b.threads[k]; ok {
		return i
	}
	off := len(b.runs)
	b.hist = b.cat.AppendRuns(b.hist[:0], b.proc, int(tid), b.from, b.to)
	for _, o := range b.hist {
		b.runs = append(b.runs, run{first: o.First, last: o.Last, rec: o.Record, firstExact: o.FirstExact, lastExact: o.LastExact})
	}
	clear(b.hist) // drop the record pointers
	n := len(b.runs) - off
	b.states = append(b.states, threadState{off: off, n: n, cur: max(0, n-1)})
	i := int32(len(b.states) - 1)
	b.threads[k] = i
	return i
}

// result returns what rec adds to a sample, adding its link and
// attributes to the dictionary (the caller keeps it with the record's run,
// so it is computed once per record and message).
func (b *batch) result(rec *catalog.ThreadRecord) recResult {
	var r recResult
	tr, sp := rec.Record.TraceID, rec.Record.SpanID
	if tr != ([16]byte{}) && sp != ([8]byte{}) {
		r.link = b.linkIndex(tr, sp)
	}
	if kv := rec.SortedAttributes(); len(kv) > 0 {
		// The catalog shares one slice between records with the same
		// attributes: each distinct set is resolved once per message.
		if w, ok := b.sets[&kv[0]]; ok {
			r.attrs, r.keys = w.attrs, w.keys
			return r
		}
		// Both slices are windows of the arena; a later append that moves
		// the arena leaves them on the old (unchanged) backing array.
		n, start := len(kv), len(b.arena)
		b.arena = slices.Grow(b.arena, 2*n)[:start+2*n]
		w := b.arena[start:]
		for i, a := range kv {
			w[n+i] = b.stringIndex(a.Key)
			w[i] = b.attrIndex(w[n+i], a.Value)
		}
		r.attrs, r.keys = w[:n:n], w[n:2*n:2*n]
		b.sets[&kv[0]] = r
	}
	return r
}

// addAttributes appends r's attributes whose key the sample lacks (its own
// value of a key wins).
func (b *batch) addAttributes(ai pcommon.Int32Slice, r recResult) {
	n0 := ai.Len()
	var add [8]int32 // typical records have few attributes: no allocation
	extra := add[:0]
outer:
	for i, ki := range r.keys {
		for j := range n0 {
			idx := ai.At(j)
			if idx == r.attrs[i] {
				continue outer
			}
			if idx > 0 && int(idx) < len(b.keyOf) && b.keyOf[idx] == ki {
				continue outer
			}
		}
		extra = append(extra, r.attrs[i])
	}
	if len(extra) > 0 {
		ai.EnsureCapacity(n0 + len(extra))
		ai.Append(extra...)
	}
}

// stringIndex returns the string table index of s, adding it if absent.
// A message needs few distinct keys, so a linear search of the table per
// distinct key is cheaper than indexing the whole (large) table.
func (b *batch) stringIndex(s string) int32 {
	if i, ok := b.strIdx[s]; ok {
		return i
	}
	if b.strs.Len() == 0 {
		b.strs.Append("") // index 0 is the empty string
	}
	idx := int32(-1)
	for i, v := range b.strs.All() {
		if i > 0 && v == s {
			idx = int32(i)
			break
		}
	}
	if idx < 0 {
		b.strs.Append(s)
		idx = int32(b.strs.Len() - 1)
	}
	b.strIdx[s] = idx
	return idx
}

// attrIndex returns the index of the string attribute key=val, adding it
// if the table has no equal entry.
func (b *batch) attrIndex(key int32, val string) int32 {
	if !b.attrIdxBuilt {
		b.attrIdxBuilt = true
		if b.attrs.Len() == 0 {
			b.attrs.AppendEmpty() // index 0 is the empty attribute
			b.keyOf = append(b.keyOf, 0)
		}
		for i := 1; i < b.attrs.Len(); i++ {
			kv := b.attrs.At(i)
			if kv.UnitStrindex() == 0 && kv.Value().Type() == pcommon.ValueTypeStr {
				k := attrKey{kv.KeyStrindex(), kv.Value().Str()}
				if _, dup := b.attrIdx[k]; !dup {
					b.attrIdx[k] = int32(i)
				}
			}
		}
	}
	k := attrKey{key, val}
	if i, ok := b.attrIdx[k]; ok {
		return i
	}
	kv := b.attrs.AppendEmpty()
	kv.SetKeyStrindex(key)
	kv.Value().SetStr(val)
	i := int32(b.attrs.Len() - 1)
	b.attrIdx[k] = i
	b.keyOf = append(b.keyOf, key)
	return i
}

// linkIndex returns the index of the link (trace, span), adding it if the
// table has no equal entry.
func (b *batch) linkIndex(trace [16]byte, span [8]byte) int32 {
	if !b.linkIdxBuilt {
		b.linkIdxBuilt = true
		if b.links.Len() == 0 {
			b.links.AppendEmpty() // index 0 is the empty link
		}
		for i := 1; i < b.links.Len(); i++ {
			l := b.links.At(i)
			k := linkKey(l.TraceID(), l.SpanID())
			if _, dup := b.linkIdx[k]; !dup {
				b.linkIdx[k] = int32(i)
			}
		}
	}
	k := linkKey(trace, span)
	if i, ok := b.linkIdx[k]; ok {
		return i
	}
	l := b.links.AppendEmpty()
	l.SetTraceID(trace)
	l.SetSpanID(span)
	i := int32(b.links.Len() - 1)
	b.linkIdx[k] = i
	return i
}

func linkKey(trace [16]byte, span [8]byte) (k [24]byte) {
	copy(k[:16], trace[:])
	copy(k[16:], span[:])
	return k
}

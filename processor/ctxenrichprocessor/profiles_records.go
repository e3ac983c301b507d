package ctxenrichprocessor

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/catalog"
)

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

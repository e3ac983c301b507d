package ctxenrichprocessor

import (
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
	ru := &b.results[ri]
	if !ru.resolved {
		ru.res, ru.resolved = b.result(b.runs[ri].Record), true
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

func missReason(m catalog.Miss) reason {
	switch m {
	case catalog.Vouched:
		return reasonNone
	case catalog.UnknownThread:
		return reasonUnknownThread
	case catalog.NoSpan:
		return reasonNoSpan
	case catalog.Ambiguous:
		return reasonAmbiguous
	}
	return reasonStale
}

// recordAt returns the index in b.runs of the run whose record st's thread
// had at t, or -1 and why the catalog cannot vouch for one.
func (b *batch) recordAt(st *threadState, t int64) (int, reason) {
	i, miss := st.cursor.RunAt(t, int64(b.e.cfg.MatchWindow))
	if miss != catalog.Vouched {
		return -1, missReason(miss)
	}
	return st.off + i, reasonNone
}

// thread returns the index of the batch's state of a thread, reading its
// history from the catalog the first time: one locked copy per thread and
// message instead of one lookup per sample.
func (b *batch) thread(pid, tid int64) int32 {
	k := threadKey{pid, tid}
	if i, ok := b.threads[k]; ok {
		return i
	}
	off := len(b.runs)
	b.runs = b.cat.AppendRuns(b.runs, b.proc, int(tid), b.from, b.to)
	for range len(b.runs) - off {
		b.results = append(b.results, runResult{})
	}
	b.states = append(b.states, threadState{off: off, cursor: catalog.NewCursor(b.runs[off:len(b.runs):len(b.runs)])})
	i := int32(len(b.states) - 1)
	b.threads[k] = i
	return i
}

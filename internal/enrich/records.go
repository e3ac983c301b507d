// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/catalog"
)

// joinSample gives sample i the link and attributes of the record its
// thread had when it was taken.
func (b *batch) joinSample(samples pprofile.SampleSlice, i int) {
	s := samples.At(i)
	tid, tidAttr := b.dict.TID(s.AttributeIndices())
	if tid < 0 {
		b.cnt.Unmatched[reasonNoThreadID]++
		return
	}
	ts := s.TimestampsUnixNano()
	n := ts.Len()
	if n == 0 {
		b.cnt.Unmatched[reasonNoTimestamp]++
		return
	}
	sl := &b.slots[tidAttr]
	if sl.gen != b.gen {
		*sl = slot{gen: b.gen, state: b.thread(tid)}
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
func (b *batch) apply(s pprofile.Sample, ri int, why Reason) {
	if why != reasonNone {
		b.cnt.Unmatched[why]++
		return
	}
	ru := &b.results[ri]
	if !ru.resolved {
		ru.res, ru.resolved = b.add.result(b.runs[ri].Record), true
	}
	r := ru.res
	if r.link > 0 && (s.LinkIndex() <= 0 || b.policy.OverrideLinks) {
		s.SetLinkIndex(r.link)
	}
	if len(r.attrs) > 0 {
		b.add.addAttributes(s.AttributeIndices(), r)
	}
	b.cnt.Enriched++
}

// recordPart is the timestamps of a split sample that saw one record (or
// one reason for none): n of them, at off in recordSplit's buffers.
type recordPart struct {
	run    int // index in batch.runs (-1: none)
	why    Reason
	n, off int
}

// recordSplit is splitByRecord's scratch.
type recordSplit struct {
	parts  []recordPart
	partOf []int32 // per timestamp of the sample: its part
	// byRun (per batch.runs index) and byMiss (per reason): 1 + the part
	// of that record, 0: none yet. Zero between samples.
	byRun   []int32
	byMiss  [NumReasons + 1]int32
	ts      []uint64
	vals    []int64
	samples []pprofile.Sample
	fill    []int32 // per part: its next free slot in ts and vals
}

// emptied returns r for the next message: its buffers emptied, the rest
// zero.
func (r *recordSplit) emptied() recordSplit {
	return recordSplit{
		parts: r.parts[:0], partOf: r.partOf[:0], byRun: r.byRun[:0], fill: r.fill[:0],
		ts: r.ts[:0], vals: r.vals[:0], samples: emptied(r.samples),
	}
}

// splitByRecord splits s, whose timestamps saw several records, into one
// sample per record (the first stays in s, the others are appended to
// samples), and joins each. Each timestamp goes to its record's part once,
// in one pass: the cost is linear in the timestamps, however they
// alternate. The values follow the timestamps when the split keeps their
// meaning: none, one per timestamp, or one count equal to the number of
// timestamps; otherwise s is left whole and counted ambiguous.
func (b *batch) splitByRecord(samples pprofile.SampleSlice, s pprofile.Sample, st *threadState) {
	ts, vals := s.TimestampsUnixNano(), s.Values()
	n, nv := ts.Len(), vals.Len()
	perTimestamp, count := nv == n, nv == 1 && vals.At(0) == int64(n)
	if nv != 0 && !perTimestamp && !count {
		b.cnt.Unmatched[reasonAmbiguous]++
		return
	}
	r := &b.record
	b.partition(st, ts)
	r.gather(ts, vals, perTimestamp)
	// The copies are made without the timestamps and values (each gets only
	// its own), so a copy costs the sample's attributes, not its times.
	ts.FromRaw(nil)
	vals.FromRaw(nil)
	r.samples = append(r.samples[:0], s)
	for range len(r.parts) - 1 {
		p := samples.AppendEmpty()
		s.CopyTo(p)
		r.samples = append(r.samples, p)
	}
	for k, part := range r.parts {
		p := r.samples[k]
		p.TimestampsUnixNano().FromRaw(r.ts[part.off : part.off+part.n])
		switch {
		case perTimestamp:
			p.Values().FromRaw(r.vals[part.off : part.off+part.n])
		case count:
			p.Values().Append(int64(part.n))
		}
		b.apply(p, part.run, part.why)
	}
	clear(r.samples)
	b.cnt.SamplesSplit++
}

// partition finds the record of each timestamp (r.partOf) and the parts,
// in the order of their first timestamp.
func (b *batch) partition(st *threadState, ts pcommon.UInt64Slice) {
	r := &b.record
	r.parts, r.partOf = r.parts[:0], r.partOf[:0]
	if len(r.byRun) < len(b.runs) {
		r.byRun = append(r.byRun, make([]int32, len(b.runs)-len(r.byRun))...)
	}
	for _, t := range ts.All() {
		ri, why := b.recordAt(st, int64(t))
		slot := &r.byMiss[why]
		if ri >= 0 {
			slot = &r.byRun[ri]
		}
		if *slot == 0 {
			r.parts = append(r.parts, recordPart{run: ri, why: why})
			*slot = int32(len(r.parts))
		}
		r.parts[*slot-1].n++
		r.partOf = append(r.partOf, *slot-1)
	}
	for _, p := range r.parts {
		if p.run >= 0 {
			r.byRun[p.run] = 0
		} else {
			r.byMiss[p.why] = 0
		}
	}
}

// gather lays the timestamps (and values, one per timestamp) out part by
// part, each part's in their order in the sample.
func (r *recordSplit) gather(ts pcommon.UInt64Slice, vals pcommon.Int64Slice, perTimestamp bool) {
	off := 0
	for k := range r.parts {
		r.parts[k].off = off
		off += r.parts[k].n
	}
	r.ts = slices.Grow(r.ts[:0], off)[:off]
	if perTimestamp {
		r.vals = slices.Grow(r.vals[:0], off)[:off]
	}
	r.fill = r.fill[:0]
	for _, p := range r.parts {
		r.fill = append(r.fill, int32(p.off))
	}
	fill := r.fill
	for j, t := range ts.All() {
		k := r.partOf[j]
		r.ts[fill[k]] = t
		if perTimestamp {
			r.vals[fill[k]] = vals.At(j)
		}
		fill[k]++
	}
}

// reasonNone: the sample matched.
const reasonNone = NumReasons

func missReason(m catalog.Miss) Reason {
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
func (b *batch) recordAt(st *threadState, t int64) (int, Reason) {
	i, miss := st.cursor.RunAt(t, int64(b.policy.MatchWindow))
	if miss != catalog.Vouched {
		return -1, missReason(miss)
	}
	return st.off + i, reasonNone
}

// thread returns the index of the batch's state of a thread, reading its
// history from the catalog the first time: one locked copy per thread and
// message instead of one lookup per sample.
func (b *batch) thread(tid int64) int32 {
	k := threadKey{b.proc, tid}
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

// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/cputime"
)

// spanMessage is one message read by the logs output: its linked samples'
// CPU time by span, and the stacks of each span's samples.
type spanMessage struct {
	message
	topFunctions bool // span_records.top_functions > 0
	// spanOf: per link index, 1 + the slot of its span (0: none yet); a
	// link seen under two resources takes its other slots from spans.
	spanOf  []int32
	spans   map[spanKey]int32
	perSpan []localSpan
	// leafSamples: the stack and count of each sample of a span, chained
	// per span (localSpan.firstLeaf) in the order of the samples.
	leafSamples []leafSample
	// leafOf caches at the merge, per stack index, its leaf's frame id
	// (see leafID).
	leafOf []int32
	// recs: at the merge, per local span, its record (nil: folded).
	recs []*spanRecord
}

type spanKey struct {
	res  int32
	link int32
}

type localSpan struct {
	key         seriesKey // the dimensions of the span's first sample
	link        int32
	cpu, n      int64
	first, last uint64
	// firstLeaf, lastLeaf: the span's chain in leafSamples (-1: none).
	firstLeaf, lastLeaf int32
}

// leafSample is one sample's stack, its frame resolved at the merge.
type leafSample struct {
	stack int32
	next  int32 // the span's next in leafSamples, or -1
	n     int64
}

// read reads pd's linked samples into m's local spans.
func (m *spanMessage) read(cfg *Config, pd pprofile.Profiles) {
	m.reset(cfg, pd)
	m.topFunctions = cfg.SpanRecords.TopFunctions > 0
	m.perSpan, m.leafSamples = m.perSpan[:0], m.leafSamples[:0]
	if m.spans == nil {
		m.spans = map[spanKey]int32{}
	}
	clear(m.spans)
	n := m.rd.LinkCount()
	m.spanOf = slices.Grow(m.spanOf[:0], n)[:n]
	clear(m.spanOf)
	m.message.read(cfg, pd, m)
}

// readSamples reads one profile's linked samples into their spans.
func (m *spanMessage) readSamples(samples pprofile.SampleSlice, unit cputime.Unit, period int64, resIdx int32, unknown bool) {
	var s cputime.Sample
	for _, smp := range samples.All() {
		if why := m.rd.Read(smp, unit, period, &s); why != cputime.Valid {
			m.counts.invalid[why]++
			continue
		}
		m.count(&s, unknown)
		if s.Link >= 0 {
			m.addSpan(resIdx, &s)
		}
	}
}

// addSpan adds s (of resource res) to its span; a span's dimensions are
// its first sample's.
func (m *spanMessage) addSpan(res int32, s *cputime.Sample) {
	var i int32
	ok := false
	if j := m.spanOf[s.Link]; j > 0 && m.perSpan[j-1].key.res == res {
		i, ok = j-1, true
	} else if j > 0 {
		i, ok = m.spans[spanKey{res: res, link: s.Link}]
	}
	if !ok {
		i = int32(len(m.perSpan))
		m.perSpan = append(m.perSpan, localSpan{link: s.Link, first: s.Time, firstLeaf: -1, lastLeaf: -1})
		m.rd.PickKeys(s)
		m.key(res, s, &m.perSpan[i].key)
		if m.spanOf[s.Link] == 0 {
			m.spanOf[s.Link] = i + 1
		} else {
			m.spans[spanKey{res: res, link: s.Link}] = i
		}
	}
	ls := &m.perSpan[i]
	ls.cpu += s.CPUNanos
	ls.n += s.Count
	if s.Time != 0 && (ls.first == 0 || s.Time < ls.first) {
		ls.first = s.Time
	}
	ls.last = max(ls.last, s.Time)
	if !m.topFunctions {
		return
	}
	k := int32(len(m.leafSamples))
	m.leafSamples = append(m.leafSamples, leafSample{stack: s.Stack, next: -1, n: s.Count})
	if ls.lastLeaf >= 0 {
		m.leafSamples[ls.lastLeaf].next = k
	} else {
		ls.firstLeaf = k
	}
	ls.lastLeaf = k
}

// Values of leafOf below 1 (1 + id: a numbered frame).
const (
	leafUnseen     = 0  // not looked at yet
	leafNone       = -1 // no leaf: an empty stack, or an index outside its table
	leafUnnumbered = -2 // a frame the interval has not numbered (yet)
)

// leafID returns the frame id of stack st's leaf, adding its frame to
// frames when add is set; ok is false when st has no leaf, or its frame
// has no id and add is not set. Frames are numbered only as a span record
// counts them, so that their number stays within the records' bound.
func (m *spanMessage) leafID(frames *cputime.Frames, st int32, add bool) (id int32, ok bool) {
	if v := m.leafOf[st]; v > 0 {
		return v - 1, true
	} else if v == leafNone || (v == leafUnnumbered && !add) {
		return 0, false
	}
	f, ok := m.rd.Leaf(st)
	if !ok {
		m.leafOf[st] = leafNone
		return 0, false
	}
	if id, ok = frames.ID(f); !ok && add {
		id, ok = frames.Add(f), true
	}
	m.leafOf[st] = leafUnnumbered
	if ok {
		m.leafOf[st] = id + 1
	}
	return id, ok
}

// reusable reports whether m's buffers are small enough to keep.
func (m *spanMessage) reusable() bool {
	return m.message.reusable() && len(m.perSpan) <= maxScratch && len(m.spanOf) <= 4*maxScratch &&
		len(m.leafSamples) <= 4*maxScratch && len(m.leafOf) <= 4*maxScratch
}

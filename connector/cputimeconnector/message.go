// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"math/bits"
	"math/rand/v2"
	"slices"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/cputime"
)

// seriesKey names a series within one message: the resource and, per
// dimension, the sample's attribute index (-1: the sample has none).
type seriesKey struct {
	res  int32
	dims [MaxDimensions]int32
}

// message is one ConsumeProfiles call's reading: its resources, and for
// each valid CPU sample, its series and span, aggregated locally (no lock,
// no allocation per sample) before one merge into the interval.
type message struct {
	rd        cputime.Reader
	resources []*resource

	// seriesTable finds a key's local series: open addressing, 1 + the
	// slot in perSeries (0: empty), a power of two at most half full,
	// hashed with seed (random per message: the keys are attribute indices
	// the sender chooses, and under a fixed hash a crafted message walked
	// one probe cluster per sample). Not a Go map: 16 % more per sample on
	// ordinary messages (BENCHMARKS.md, "Series table").
	seriesTable []int32
	seed        uint64
	perSeries   []localSeries
	nDims       int
	// exOf: per link index, the series it was last seen in and its place
	// in the series' exemplars (see addSeries).
	exOf []exemplarRef

	// spanOf: per link index, 1 + the slot of its span (0: none yet); a
	// link seen under two resources takes its other slots from spans.
	spanOf   []int32
	spans    map[spanKey]int32
	perSpan  []localSpan
	maxLinks int // exemplars per local series
	// leafSamples: the stack and count of each sample of a span, chained
	// per span (localSpan.firstLeaf) in the order of the samples.
	leafSamples []leafSample
	// leafOf caches at the merge, per stack index, its leaf's frame id
	// (see leafID).
	leafOf []int32
	// recs: at the merge, per local span, its record (nil: folded).
	recs []*spanRecord

	counts counts

	// keyBuf and dimBuf: a series' key and dimensions while it is merged.
	keyBuf []byte
	dimBuf []kv
}

type localSeries struct {
	key       seriesKey
	cpu, n    int64
	exemplars []localExemplar
}

type exemplarRef struct {
	slot  int32 // 1 + the series' slot (0: none yet)
	place int32 // the link's place in the series' exemplars, -1: absent, and they were full (or there are none)
}

type localExemplar struct {
	link int32
	cpu  int64
	time uint64
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

// counts are one message's outcomes, recorded once per message.
type counts struct {
	linked, unlinked, unknownService int64
	notCPU                           int64
	invalid                          [8]int64 // by cputime.Invalid
	overflow                         int64
	folded                           int64
}

func (m *message) read(c *cpuConnector, pd pprofile.Profiles) {
	m.rd.Reset(pd.Dictionary())
	m.resources = m.resources[:0]
	m.perSeries, m.perSpan = m.perSeries[:0], m.perSpan[:0]
	m.leafSamples = m.leafSamples[:0]
	m.counts = counts{}
	m.maxLinks = 0
	m.nDims = len(c.cfg.Dimensions)
	if c.signal == signalMetrics {
		clear(m.seriesTable)
		m.seed = rand.Uint64()
		if c.cfg.Exemplars.Enabled {
			m.maxLinks = c.cfg.Exemplars.MaxPerDataPoint
		}
		n := m.rd.LinkCount()
		m.exOf = slices.Grow(m.exOf[:0], n)[:n]
		clear(m.exOf)
	} else {
		if m.spans == nil {
			m.spans = map[spanKey]int32{}
		}
		clear(m.spans)
		n := m.rd.LinkCount()
		m.spanOf = slices.Grow(m.spanOf[:0], n)[:n]
		clear(m.spanOf)
	}
	for _, rp := range pd.ResourceProfiles().All() {
		var res *resource
		resIdx := int32(len(m.resources))
		for _, sp := range rp.ScopeProfiles().All() {
			for _, p := range sp.Profiles().All() {
				samples := p.Samples()
				if samples.Len() == 0 {
					continue
				}
				unit, period := cputime.Classify(pd.Dictionary(), p)
				if unit == cputime.NotCPU {
					m.counts.notCPU += int64(samples.Len())
					continue
				}
				if res == nil {
					res = newResource(c, rp)
					m.resources = append(m.resources, res)
				}
				m.readSamples(c, samples, unit, period, resIdx, res.unknown)
			}
		}
	}
}

// readSamples reads one profile's samples into the local aggregate.
func (m *message) readSamples(c *cpuConnector, samples pprofile.SampleSlice, unit cputime.Unit, period int64, resIdx int32, unknown bool) {
	var s cputime.Sample
	var key, last seriesKey
	lastSlot := int32(-1)
	for _, smp := range samples.All() {
		if why := m.rd.Read(smp, unit, period, &s); why != cputime.Valid {
			m.counts.invalid[why]++
			continue
		}
		if s.Link >= 0 {
			m.counts.linked++
		} else {
			m.counts.unlinked++
		}
		if unknown {
			m.counts.unknownService++
		}
		if c.signal == signalMetrics {
			m.key(resIdx, &s, &key)
			// Consecutive samples of one thread, and the samples of one
			// span, mostly share a key.
			if lastSlot < 0 || !m.sameKey(&key, &last) {
				lastSlot = -1
				if s.Link >= 0 {
					if r := m.exOf[s.Link]; r.slot > 0 && m.sameKey(&m.perSeries[r.slot-1].key, &key) {
						lastSlot = r.slot - 1
					}
				}
				if lastSlot < 0 {
					lastSlot = m.seriesSlot(&key)
				}
				last = key
			}
			m.addSeries(lastSlot, &s)
		} else if s.Link >= 0 {
			m.addSpan(c, resIdx, &s)
		}
	}
}

// key sets k to the series key of sample s of resource res: per
// dimension, the first of its attributes that fills it (the reader picks
// them out).
func (m *message) key(res int32, s *cputime.Sample, k *seriesKey) {
	k.res = res
	copy(k.dims[:m.nDims], s.Keyed[:m.nDims])
}

// sameKey compares the parts of two keys a message sets.
func (m *message) sameKey(x, y *seriesKey) bool {
	if x.res != y.res {
		return false
	}
	for i := range m.nDims {
		if x.dims[i] != y.dims[i] {
			return false
		}
	}
	return true
}

func (m *message) seriesSlot(key *seriesKey) int32 {
	if len(m.perSeries) >= len(m.seriesTable)/2 {
		m.growSeriesTable()
	}
	mask := uint64(len(m.seriesTable) - 1)
	for h := m.hash(key) & mask; ; h = (h + 1) & mask {
		j := m.seriesTable[h]
		if j == 0 {
			i := int32(len(m.perSeries))
			m.seriesTable[h] = i + 1
			if len(m.perSeries) < cap(m.perSeries) { // reuse the slot's exemplar buffer
				m.perSeries = m.perSeries[:i+1]
				ls := &m.perSeries[i]
				*ls = localSeries{key: *key, exemplars: ls.exemplars[:0]}
			} else {
				m.perSeries = append(m.perSeries, localSeries{key: *key})
			}
			return i
		}
		if m.sameKey(&m.perSeries[j-1].key, key) {
			return j - 1
		}
	}
}

// hash mixes the key's resource and dimensions with the message's random
// seed (wyhash's multiply-fold, as Go's own maps without AES): the
// dimensions are attribute indices the sender chooses.
func (m *message) hash(k *seriesKey) uint64 {
	h := m.seed ^ uint64(uint32(k.res))
	for _, d := range k.dims[:m.nDims] {
		h = mix(h^uint64(uint32(d)), m.seed^0xe7037ed1a0b428db)
	}
	return mix(h, 0xa0761d6478bd642f)
}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// growSeriesTable doubles the table (from 256 entries) and places the
// series again.
func (m *message) growSeriesTable() {
	m.seriesTable = make([]int32, max(256, 2*len(m.seriesTable)))
	mask := uint64(len(m.seriesTable) - 1)
	for i := range m.perSeries {
		h := m.hash(&m.perSeries[i].key) & mask
		for m.seriesTable[h] != 0 {
			h = (h + 1) & mask
		}
		m.seriesTable[h] = int32(i + 1)
	}
}

// addSeries adds s to the series in slot. A link's exemplar is found
// through exOf when the link was last seen in the same series: its
// place, or that it is absent and the exemplars full (they only grow
// within a message, so it stays absent).
func (m *message) addSeries(slot int32, s *cputime.Sample) {
	ls := &m.perSeries[slot]
	ls.cpu += s.CPUNanos
	ls.n += s.Count
	if s.Link < 0 {
		return
	}
	ref := &m.exOf[s.Link]
	if ref.slot != slot+1 {
		*ref = exemplarRef{slot: slot + 1, place: -1}
		for i := range ls.exemplars {
			if ls.exemplars[i].link == s.Link {
				ref.place = int32(i)
				break
			}
		}
		if ref.place < 0 && len(ls.exemplars) < m.maxLinks {
			ls.exemplars = append(ls.exemplars, localExemplar{link: s.Link, time: s.Time})
			ref.place = int32(len(ls.exemplars) - 1)
		}
	}
	if ref.place >= 0 {
		e := &ls.exemplars[ref.place]
		e.cpu += s.CPUNanos
		e.time = max(e.time, s.Time)
	}
}

// addSpan adds s (of resource res) to its span; a span's dimensions are
// its first sample's.
func (m *message) addSpan(c *cpuConnector, res int32, s *cputime.Sample) {
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
	if c.cfg.SpanRecords.TopFunctions == 0 {
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
func (m *message) leafID(frames *cputime.Frames, st int32, add bool) (id int32, ok bool) {
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

// dims returns the data point attributes of a local key (each
// dimension's value from the sample, else from the resource) and the
// series' identity (the resource's key, then the dimensions), both in the
// message's buffers: valid until the next call.
func (m *message) dims(c *cpuConnector, key seriesKey) ([]kv, []byte) {
	res := m.resources[key.res]
	m.dimBuf = m.dimBuf[:0]
	for i, d := range c.cfg.Dimensions {
		if a := key.dims[i]; a >= 0 {
			m.dimBuf = append(m.dimBuf, kv{d.Name, m.rd.AttrValue(a).AsString(), true})
		} else if res.dims[i].ok {
			m.dimBuf = append(m.dimBuf, res.dims[i])
		}
	}
	b := append(m.keyBuf[:0], res.key...)
	b = append(b, 1)
	for _, d := range m.dimBuf {
		b = append(b, d.key...)
		b = append(b, 0)
		b = append(b, d.value...)
		b = append(b, 0)
	}
	m.keyBuf = b
	return m.dimBuf, b
}

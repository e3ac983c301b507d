// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"math/rand/v2"
	"slices"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/cputime"
)

// seriesMessage is one message read by the metrics output: its samples'
// CPU time by local series, and their exemplars.
type seriesMessage struct {
	message
	// seriesTable finds a key's local series: open addressing, 1 + the
	// slot in perSeries (0: empty), a power of two at most half full,
	// hashed with seed (random per message: the keys are attribute indices
	// the sender chooses, and under a fixed hash a crafted message walked
	// one probe cluster per sample). Not a Go map: slower per sample on
	// ordinary messages (BENCHMARKS.md, "Series table").
	seriesTable []int32
	seed        uint64
	perSeries   []localSeries
	// exOf: per link index, the series it was last seen in and its place
	// in the series' exemplars (see addSeries).
	exOf     []exemplarRef
	maxLinks int // exemplars per local series
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

// read reads pd's samples into m's local series.
func (m *seriesMessage) read(cfg *Config, pd pprofile.Profiles) {
	m.reset(cfg, pd)
	clear(m.seriesTable)
	m.seed = rand.Uint64()
	m.perSeries = m.perSeries[:0]
	m.maxLinks = 0
	if cfg.Exemplars.Enabled {
		m.maxLinks = cfg.Exemplars.MaxPerDataPoint
	}
	n := m.rd.LinkCount()
	m.exOf = slices.Grow(m.exOf[:0], n)[:n]
	clear(m.exOf)
	m.message.read(cfg, pd, m)
}

// readSamples reads one profile's samples into the local series.
func (m *seriesMessage) readSamples(samples pprofile.SampleSlice, unit cputime.Unit, period int64, resIdx int32, unknown bool) {
	var s cputime.Sample
	var key, last seriesKey
	lastSlot := int32(-1)
	for _, smp := range samples.All() {
		if why := m.rd.Read(smp, unit, period, &s); why != cputime.Valid {
			m.counts.invalid[why]++
			continue
		}
		m.count(&s, unknown)
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
	}
}

// addSeries adds s to the series in slot. A link's exemplar is found
// through exOf when the link was last seen in the same series: its
// place, or that it is absent and the exemplars full (they only grow
// within a message, so it stays absent).
func (m *seriesMessage) addSeries(slot int32, s *cputime.Sample) {
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

// reusable reports whether m's buffers are small enough to keep.
func (m *seriesMessage) reusable() bool {
	return m.message.reusable() && len(m.perSeries) <= maxScratch && len(m.seriesTable) <= 4*maxScratch && len(m.exOf) <= 4*maxScratch
}

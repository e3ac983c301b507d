// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import "math/bits"

// seriesSlot returns the slot of key's local series, adding it.
func (m *seriesMessage) seriesSlot(key *seriesKey) int32 {
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
func (m *seriesMessage) hash(k *seriesKey) uint64 {
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
func (m *seriesMessage) growSeriesTable() {
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

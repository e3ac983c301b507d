// SPDX-License-Identifier: Apache-2.0

//go:build linux

package safemem

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/otelctx/otelctx/internal/proc/pagemap"
	"github.com/otelctx/otelctx/internal/proc/remote"
)

// Bounds of the residency pass of ReadEach: a group of ranges is checked
// with one pagemap pread of at most maxGroupPages entries (32 KiB), and at
// most maxGroups groups so (a batch spread wider is checked against the
// mappings, one maps read for the round).
const (
	maxGroupPages = 4096
	maxGroups     = 64
)

// ReadEach is remote.Memory.ReadEach over the ranges the checks accept:
// bufs[i] is read at addrs[i], and ok[i] set, only if the range lies in
// anonymous memory or on pages in the process's page tables, as for
// ReadAt. A batch is checked first against the page tables (the entries
// PageEntries read this round, else one pagemap pread per group of nearby
// ranges; no maps read); the ranges that fail that are checked against the
// mappings. A range refused or unreadable is not read (ok false); err is
// set only when nothing can be read (the process is gone, the maps file
// unreadable).
func (m *Memory) ReadEach(bufs [][]byte, addrs []uint64, ok []bool) (calls int, err error) {
	if len(addrs) != len(bufs) || len(ok) != len(bufs) {
		return 0, fmt.Errorf("safemem: ReadEach: %d buffers, %d addresses, %d flags", len(bufs), len(addrs), len(ok))
	}
	present := m.presentEach(bufs, addrs)
	s := &m.sub
	s.idx = s.idx[:0]
	all := true
	for i, b := range bufs {
		if len(b) == 0 || present[i] {
			s.idx = append(s.idx, i)
			continue
		}
		if err := m.check(addrs[i], uint64(len(b))); err != nil {
			if !refused(err) {
				return 0, err
			}
			all = false
			continue
		}
		s.idx = append(s.idx, i)
	}
	if all {
		return m.mem.ReadEach(bufs, addrs, ok)
	}
	clear(ok)
	s.bufs, s.addrs = s.bufs[:0], s.addrs[:0]
	for _, i := range s.idx {
		s.bufs, s.addrs = append(s.bufs, bufs[i]), append(s.addrs, addrs[i])
	}
	if len(s.idx) == 0 {
		return 0, nil
	}
	s.ok = slices.Grow(s.ok[:0], len(s.idx))[:len(s.idx)]
	calls, err = m.mem.ReadEach(s.bufs, s.addrs, s.ok)
	for k, i := range s.idx {
		ok[i] = s.ok[k]
	}
	clear(s.bufs) // no reference to the caller's buffers kept
	return calls, err
}

// refused: the range alone is refused (unmapped, or a file's pages not
// resident); other errors mean the process cannot be read.
func refused(err error) bool {
	return errors.Is(err, ErrFileBacked) || errors.Is(err, remote.ErrBadAddress)
}

// readEachScratch is ReadEach's reusable state (a Memory is not safe for
// concurrent use).
type readEachScratch struct {
	bufs    [][]byte
	addrs   []uint64
	idx     []int
	ok      []bool
	present []bool
	order   []int
	// ents are the entries PageEntries read this round, from page first.
	ents  []pagemap.Entry
	first uint64
	valid bool
}

// PageEntries returns the pagemap entries of n pages from addr's (one
// pread, through the held Pagemap or the file opened for the call), for a
// caller that decides by them what to read (a page the process never
// wrote). They stand for the round: ReadEach checks ranges within them
// without reading the pagemap again (as the mappings, once loaded, stand
// for the round). Valid until the next call.
func (m *Memory) PageEntries(addr uint64, n int) ([]pagemap.Entry, error) {
	page := uint64(os.Getpagesize())
	s := &m.sub
	s.valid = false
	if n <= 0 {
		return nil, fmt.Errorf("pagemap: %d entries", n)
	}
	pm, err := m.pagemap()
	if err != nil {
		return nil, err
	}
	if pm != m.pm {
		defer pm.Close()
	}
	ents, err := m.readEntries(pm, addr/page, uint64(n))
	if err != nil {
		return nil, err
	}
	s.first, s.valid = addr/page, true
	return ents, nil
}

// pagemap is the held pagemap, else one opened for the caller to close.
func (m *Memory) pagemap() (*pagemap.File, error) {
	if m.pm.IsOpen() {
		return m.pm, nil
	}
	return pagemap.Open(m.procRoot, m.mem.PID)
}

// readEntries reads n entries from page first into the round's scratch
// (a copy: the held pagemap's buffer is reused by the next check).
func (m *Memory) readEntries(pm *pagemap.File, first, n uint64) ([]pagemap.Entry, error) {
	s := &m.sub
	m.PagemapReads++
	ents, err := pm.Read(first, int(n))
	if err != nil {
		return nil, err
	}
	s.ents = append(s.ents[:0], ents...)
	return s.ents, nil
}

// presentEach reports, per range, whether all its pages are in the page
// tables: nothing is read there that could fault. Ranges within the
// entries PageEntries read are decided by them; the others are grouped in
// address order, a group spanning at most maxGroupPages, each group one
// pread. With the mappings loaded this round it reads nothing: the checks
// then cost a binary search each.
func (m *Memory) presentEach(bufs [][]byte, addrs []uint64) []bool {
	s := &m.sub
	s.present = slices.Grow(s.present[:0], len(bufs))[:len(bufs)]
	clear(s.present)
	page := uint64(os.Getpagesize())
	s.order = s.order[:0]
	for i, b := range bufs {
		if len(b) == 0 || addrs[i]+uint64(len(b)) <= addrs[i] {
			continue
		}
		from, to := addrs[i]/page, (addrs[i]+uint64(len(b))-1)/page
		if s.valid && from >= s.first && to < s.first+uint64(len(s.ents)) {
			s.present[i] = pagemap.AllPresent(s.ents[from-s.first : to-s.first+1])
			continue
		}
		s.order = append(s.order, i)
	}
	if m.loaded || len(s.order) == 0 {
		return s.present
	}
	s.valid = false // the scratch is reused below
	pm, err := m.pagemap()
	if err != nil {
		return s.present
	}
	if pm != m.pm {
		defer pm.Close()
	}
	lo, hi := ^uint64(0), uint64(0)
	for _, i := range s.order {
		lo, hi = min(lo, addrs[i]/page), max(hi, (addrs[i]+uint64(len(bufs[i]))-1)/page)
	}
	if hi-lo < maxGroupPages { // one group: one pread
		ents, err := m.readEntries(pm, lo, hi-lo+1)
		for _, i := range s.order {
			s.present[i] = err == nil && pagemap.AllPresent(ents[addrs[i]/page-lo:(addrs[i]+uint64(len(bufs[i]))-1)/page-lo+1])
		}
		return s.present
	}
	slices.SortFunc(s.order, func(a, b int) int { return cmp.Compare(addrs[a], addrs[b]) })
	for g, k := 0, 0; k < len(s.order) && g < maxGroups; g++ {
		first, last, j := addrs[s.order[k]]/page, uint64(0), k
		for ; j < len(s.order); j++ {
			i := s.order[j]
			if to := (addrs[i] + uint64(len(bufs[i])) - 1) / page; to-first < maxGroupPages {
				last = max(last, to)
				continue
			}
			break
		}
		if j == k { // a range wider than a group: the mappings decide
			k++
			continue
		}
		ents, err := m.readEntries(pm, first, last-first+1)
		if err != nil {
			return s.present
		}
		for ; k < j; k++ {
			i := s.order[k]
			s.present[i] = pagemap.AllPresent(ents[addrs[i]/page-first : (addrs[i]+uint64(len(bufs[i]))-1)/page-first+1])
		}
	}
	return s.present
}

// cachedPresent: [addr, end) is within the entries PageEntries read this
// round, all present.
func (m *Memory) cachedPresent(addr, end uint64) bool {
	s := &m.sub
	page := uint64(os.Getpagesize())
	from, to := addr/page, (end-1)/page
	return s.valid && from >= s.first && to < s.first+uint64(len(s.ents)) && pagemap.AllPresent(s.ents[from-s.first:to-s.first+1])
}

// PID is the process m reads.
func (m *Memory) PID() int { return m.mem.PID }

package safemem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"

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
// ReadAt. A batch is checked first against the page tables (one pagemap
// pread per group of nearby ranges, no maps read); the ranges that fail
// that are checked against the mappings. A range refused or unreadable is
// not read (ok false); err is set only when nothing can be read (the
// process is gone, the maps file unreadable).
func (m *Memory) ReadEach(bufs [][]byte, addrs []uint64, ok []bool) (calls int, err error) {
	if len(addrs) != len(bufs) || len(ok) != len(bufs) {
		return 0, fmt.Errorf("safemem: ReadEach: %d buffers, %d addresses, %d flags", len(bufs), len(addrs), len(ok))
	}
	clear(ok)
	present := m.presentEach(bufs, addrs)
	m.sub.bufs, m.sub.addrs, m.sub.idx = m.sub.bufs[:0], m.sub.addrs[:0], m.sub.idx[:0]
	for i, b := range bufs {
		if len(b) == 0 {
			ok[i] = true
			continue
		}
		if !present[i] {
			if err := m.check(addrs[i], uint64(len(b))); err != nil {
				if refused(err) {
					continue
				}
				return calls, err
			}
		}
		m.sub.bufs, m.sub.addrs, m.sub.idx = append(m.sub.bufs, b), append(m.sub.addrs, addrs[i]), append(m.sub.idx, i)
	}
	if len(m.sub.idx) == 0 {
		return 0, nil
	}
	m.sub.ok = slices.Grow(m.sub.ok[:0], len(m.sub.idx))[:len(m.sub.idx)]
	calls, err = m.mem.ReadEach(m.sub.bufs, m.sub.addrs, m.sub.ok)
	for k, i := range m.sub.idx {
		ok[i] = m.sub.ok[k]
	}
	clear(m.sub.bufs) // no reference to the caller's buffers kept
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
	ents    []byte
}

// presentEach reports, per range, whether all its pages are in the page
// tables: nothing is read there that could fault. Ranges are grouped in
// address order, a group spanning at most maxGroupPages; each group costs
// one pread of the pagemap (the held one, else opened for the call).
// With the mappings loaded this round it reads nothing: the checks then
// cost a binary search each.
func (m *Memory) presentEach(bufs [][]byte, addrs []uint64) []bool {
	s := &m.sub
	s.present = slices.Grow(s.present[:0], len(bufs))[:len(bufs)]
	clear(s.present)
	if m.loaded || len(bufs) == 0 {
		return s.present
	}
	s.order = s.order[:0]
	for i, b := range bufs {
		if len(b) > 0 && addrs[i]+uint64(len(b)) > addrs[i] {
			s.order = append(s.order, i)
		}
	}
	slices.SortFunc(s.order, func(a, b int) int {
		switch {
		case addrs[a] < addrs[b]:
			return -1
		case addrs[a] > addrs[b]:
			return 1
		}
		return 0
	})
	pm := m.pm
	page := uint64(os.Getpagesize())
	for g, k := 0, 0; k < len(s.order) && g < maxGroups; g++ {
		first := addrs[s.order[k]] / page
		last, j := first, k
		for ; j < len(s.order); j++ {
			i := s.order[j]
			end := (addrs[i] + uint64(len(bufs[i])) - 1) / page
			if addrs[i]/page-first >= maxGroupPages || end-first >= maxGroupPages {
				break
			}
			last = max(last, end)
		}
		if j == k { // one range wider than a group: the mappings decide
			k++
			continue
		}
		if pm == nil {
			opened, err := OpenPagemap(m.procRoot, m.mem.PID)
			if err != nil {
				return s.present
			}
			defer opened.Close()
			pm = opened
		}
		m.PagemapReads++
		ents, ok := pm.entries(first, last-first+1, &s.ents)
		for ; ok && k < j; k++ {
			i := s.order[k]
			s.present[i] = allPresent(ents, addrs[i]/page-first, (addrs[i]+uint64(len(bufs[i]))-1)/page-first)
		}
		k = j
	}
	return s.present
}

func allPresent(ents []byte, from, to uint64) bool {
	for p := from; p <= to; p++ {
		if binary.NativeEndian.Uint64(ents[p*8:])&pagePresent == 0 {
			return false
		}
	}
	return true
}

// entries reads n pagemap entries from page first into *buf (valid until
// the next call); false if the file could not be read whole. A file
// opened before an exec describes the old address space and reads as
// empty: it is opened again once.
func (p *Pagemap) entries(first, n uint64, buf *[]byte) ([]byte, bool) {
	if p == nil || p.f == nil {
		return nil, false
	}
	*buf = slices.Grow((*buf)[:0], int(n*8))[:n*8]
	b := *buf
	for try := 0; ; try++ {
		p.Reads++
		got, _ := p.f.ReadAt(b, int64(first*8))
		if got == len(b) {
			return b, true
		}
		if try > 0 || got != 0 {
			return nil, false
		}
		p.f.Close()
		if p.open() != nil {
			p.f = nil
			return nil, false
		}
	}
}

// PID is the process m reads.
func (m *Memory) PID() int { return m.mem.PID }

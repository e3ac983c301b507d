// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package ddscan finds the Datadog Java profiler's DD_OTEL_CTX buffer in a
// process (by the mapping's name, by the header's magic at the start of an
// unnamed mapping, or at a page inside a larger one) and checks that a
// buffer found earlier is still there. Every read of the process goes
// through Memory, within the budgets below; the header is parsed by
// internal/format/ddotel. Search is the scanner's plug-in for it
// (scan.BufferSearch): which processes are searched (Mode), and which
// failed checks lose the buffer.
package ddscan

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/pagemap"
	"github.com/otelctx/otelctx/internal/proc/procmaps"
	"github.com/otelctx/otelctx/internal/scan"
)

// Memory is how ddscan reads another process's memory: in the collector a
// *safemem.Memory, which reads a range only where the read cannot block on
// a file system (anonymous memory, or pages in the page tables); the
// candidates' addresses are the process's choice. ReadEach reads bufs[i] at
// addrs[i] and sets ok[i] for the ranges read; its error means nothing
// more can be read. PageEntries returns n pagemap entries from addr's page.
type Memory interface {
	PID() int
	ReadAt(p []byte, addr uint64) error
	ReadEach(bufs [][]byte, addrs []uint64, ok []bool) (calls int, err error)
	PageEntries(addr uint64, n int) ([]pagemap.Entry, error)
}

const (
	// MappingName is what the profiler names the mapping with PR_SET_VMA_ANON_NAME.
	MappingName  = "DD_OTEL_CTX"
	NamedMapping = "[anon:" + MappingName + "]"

	// MaxCandidates: a JVM has hundreds of anonymous rw mappings (stacks, arenas).
	MaxCandidates = 512

	// MaxStartEntries bounds the pagemap entries read for mapping starts: the
	// kernel's cost is about the pages a read spans, not the preads.
	MaxStartEntries = 16384

	// startWindow: first pages within this many pages share one pread.
	startWindow = 512

	// defaultCapacity: mappings of its size are read first.
	defaultCapacity = 65536
)

// ErrNotFound: no mapping of the process starts (or has a page starting)
// with a buffer; it is the scanner's scan.ErrNoBuffer.
var ErrNotFound = fmt.Errorf("%s: %w", ddotel.SchemaName, scan.ErrNoBuffer)

// DiscoverStats tell what one discovery looked at.
type DiscoverStats struct {
	// Skipped: beyond MaxCandidates or the start pagemap budget.
	Candidates, Skipped int
	Reads, Unreadable   int
	// RefusedAt lets a caller looking again tell a header it counted already.
	Refused      int
	FirstRefusal error
	RefusedAt    []uint64
	// Valid > 1 is unexpected (the profiler keeps one); the first is used.
	Valid                        int
	PagemapEntries, InsideProbes int
	Unwritten                    int
	PagemapReads, StartEntries   int
}

func maxMappingSize() uint64 {
	page := uint64(os.Getpagesize())
	return (ddotel.BufferSize(ddotel.MaxCapacity) + page - 1) / page * page
}

// plausible: the named mapping whatever its size (the header is checked
// against it), or an unnamed one no larger than the largest buffer.
func plausible(m procmaps.Mapping) bool {
	return m.Name == NamedMapping || (m.Size() >= ddotel.HeaderSize && m.Size() <= maxMappingSize())
}

// Discover finds the buffer of the process mem reads: the
// [anon:DD_OTEL_CTX] mapping or an unnamed one starting with a valid header,
// else (the kernel merges a stack mapped below it into one mapping) a header
// at a page inside one.
func Discover(procRoot string, mem Memory) (ddotel.Buffer, DiscoverStats, error) {
	pid := mem.PID()
	maps, err := procmaps.FindAnonymous(procRoot, pid, MappingName, nil)
	if err != nil {
		return ddotel.Buffer{}, DiscoverStats{}, err
	}
	pm, err := pagemap.Open(procRoot, pid)
	if err != nil {
		return ddotel.Buffer{}, DiscoverStats{}, err
	}
	// Only first pages the process wrote are read (see written): up to
	// vm.max_map_count mappings, most never written.
	starts, unwritten, skipped := writtenStarts(pm, ranked(maps))
	pm.Close()
	b, st, err := Probe(mem, starts)
	st.Unwritten, st.Skipped = unwritten, st.Skipped+skipped
	st.PagemapReads, st.StartEntries = pm.Reads, pm.Entries
	if !errors.Is(err, ErrNotFound) || st.Refused > 0 {
		// A refused header is an answer (broken or hostile), not a reason to search deeper.
		return b, st, err
	}
	b, inside, err := ProbeInside(procRoot, mem, maps)
	st.add(inside)
	return b, st, err
}

// writtenStarts keeps the candidates whose first page was written, in rank
// order, within the pagemap budgets; neighbouring pages share a pread.
func writtenStarts(pm *pagemap.File, cands []procmaps.Mapping) (starts []procmaps.Mapping, unwritten, skipped int) {
	page := uint64(os.Getpagesize())
	var pages []uint64 // the candidates' first pages, distinct, ascending
	for _, m := range cands {
		if plausible(m) {
			pages = append(pages, m.Start/page)
		}
	}
	slices.Sort(pages)
	pages = slices.Compact(pages)
	ents := make([]pagemap.Entry, len(pages))
	known := make([]bool, len(pages))
	for _, m := range cands {
		if !plausible(m) {
			continue
		}
		if len(starts) >= MaxCandidates {
			skipped++ // in rank order: the named and default-size ones are in
			continue
		}
		i, _ := slices.BinarySearch(pages, m.Start/page)
		if !known[i] {
			left := MaxStartEntries - pm.Entries
			if pm.Reads >= MaxPagemapReads || left < 1 {
				skipped++
				continue
			}
			j := i
			for j+1 < len(pages) && pages[j+1]-pages[i] < startWindow && int(pages[j+1]-pages[i]) < left {
				j++
			}
			e, err := pm.Read(pages[i], int(pages[j]-pages[i]+1))
			for k := i; k <= j; k++ {
				known[k] = true
				if err == nil {
					ents[k] = e[pages[k]-pages[i]]
				} // else: the range went away meanwhile, not written
			}
		}
		if !ents[i].Written() {
			unwritten++
			continue
		}
		starts = append(starts, m)
	}
	return starts, unwritten, skipped
}

func (s *DiscoverStats) add(o DiscoverStats) {
	s.Reads += o.Reads
	s.Unreadable += o.Unreadable
	s.Refused += o.Refused
	s.RefusedAt = append(s.RefusedAt, o.RefusedAt...)
	if s.FirstRefusal == nil {
		s.FirstRefusal = o.FirstRefusal
	}
	s.Valid += o.Valid
	s.PagemapEntries += o.PagemapEntries
	s.InsideProbes += o.InsideProbes
	s.PagemapReads += o.PagemapReads
}

// ranked: the named mapping, then default-sized ones, then address order.
func ranked(maps []procmaps.Mapping) []procmaps.Mapping {
	page := uint64(os.Getpagesize())
	defSize := (ddotel.BufferSize(defaultCapacity) + page - 1) / page * page
	rank := func(m procmaps.Mapping) int {
		switch {
		case m.Name == NamedMapping:
			return 0
		case m.Size() == defSize:
			return 1
		}
		return 2
	}
	out := append([]procmaps.Mapping(nil), maps...)
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i]) < rank(out[j]) })
	return out
}

// Probe returns the first valid buffer starting one of maps.
func Probe(mem Memory, maps []procmaps.Mapping) (ddotel.Buffer, DiscoverStats, error) {
	st := DiscoverStats{Candidates: len(maps)}
	if len(maps) == 0 {
		return ddotel.Buffer{}, st, ErrNotFound
	}
	cands := ranked(maps)
	if len(cands) > MaxCandidates {
		st.Skipped = len(cands) - MaxCandidates
		cands = cands[:MaxCandidates]
	}
	addrs := make([]uint64, len(cands))
	for i, m := range cands {
		addrs[i] = m.Start
	}
	found, err := readIdents(mem, addrs, &st, func(i int, ident []byte) (ddotel.Buffer, bool, error) {
		m := cands[i]
		h, err := ddotel.ParseHeader(ident, m.Size())
		if err != nil {
			// Without the magic it is just not a buffer; the magic or name with a bad header is a refusal.
			if !errors.Is(err, ddotel.ErrBadMagic) || m.Name == NamedMapping {
				return ddotel.Buffer{}, false, fmt.Errorf("mapping %#x-%#x: %w", m.Start, m.End, err)
			}
			return ddotel.Buffer{}, false, nil
		}
		return ddotel.Buffer{Addr: m.Start, Capacity: h.Capacity, MappingName: m.Name}, true, nil
	})
	return found, st, err
}

// readIdents reads ddotel.IdentSize bytes at each address; check says buffer,
// not a buffer, or refusal (an error).
func readIdents(mem Memory, addrs []uint64, st *DiscoverStats, check func(i int, ident []byte) (ddotel.Buffer, bool, error)) (ddotel.Buffer, error) {
	raw := make([]byte, ddotel.IdentSize*len(addrs))
	bufs := make([][]byte, len(addrs))
	for i := range addrs {
		bufs[i] = raw[i*ddotel.IdentSize : (i+1)*ddotel.IdentSize]
	}
	ok := make([]bool, len(addrs))
	calls, err := mem.ReadEach(bufs, addrs, ok)
	st.Reads = calls
	if err != nil {
		return ddotel.Buffer{}, err
	}
	var found ddotel.Buffer
	for i := range addrs {
		if !ok[i] {
			st.Unreadable++
			continue
		}
		b, isBuf, err := check(i, bufs[i])
		if err != nil {
			st.Refused++
			st.RefusedAt = append(st.RefusedAt, addrs[i])
			if st.FirstRefusal == nil {
				st.FirstRefusal = err
			}
			continue
		}
		if !isBuf {
			continue
		}
		if st.Valid++; st.Valid == 1 {
			found = b
		}
	}
	if st.Valid == 0 {
		if st.FirstRefusal != nil {
			return ddotel.Buffer{}, fmt.Errorf("%w (%d refused; first: %w)", ErrNotFound, st.Refused, st.FirstRefusal)
		}
		return ddotel.Buffer{}, ErrNotFound
	}
	return found, nil
}

// Revalidate fails when the buffer found earlier is gone or changed, so the
// caller discovers again.
func Revalidate(mem Memory, b ddotel.Buffer) error {
	ents, err := mem.PageEntries(b.Addr, 1)
	if err != nil {
		return err
	}
	if !ents[0].Written() {
		return ddotel.ErrHeaderGone
	}
	var hb [ddotel.IdentSize]byte
	if err := mem.ReadAt(hb[:], b.Addr); err != nil {
		return err
	}
	// A header that changed its capacity is a different buffer.
	h, err := ddotel.ParseHeader(hb[:], ddotel.BufferSize(b.Capacity))
	if err != nil {
		return err
	}
	if h.Capacity != b.Capacity {
		return fmt.Errorf("%w: capacity changed from %d to %d", ddotel.ErrBadCapacity, b.Capacity, h.Capacity)
	}
	return nil
}

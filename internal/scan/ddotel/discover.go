package ddotel

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"

	"github.com/otelctx/otelctx/internal/scan/procmaps"
	"github.com/otelctx/otelctx/internal/scan/remote"
)

// Discovery bounds and names.
const (
	// MappingName is what the profiler names the mapping with
	// prctl(PR_SET_VMA_ANON_NAME); it shows as NamedMapping in maps.
	MappingName  = "DD_OTEL_CTX"
	NamedMapping = "[anon:" + MappingName + "]"

	// MaxCandidates bounds the unnamed mappings whose first bytes are read
	// in one process: a JVM has hundreds of anonymous read-write mappings
	// (thread stacks, malloc arenas, GC structures), all read in one or two
	// process_vm_readv calls of IdentSize bytes each.
	MaxCandidates = 512

	// MaxStartEntries bounds the pagemap entries read for the mapping
	// starts per discovery (128 KiB of pagemap; with MaxPagemapReads
	// preads). The kernel's cost is about the pages and mappings a read
	// spans, so the entries are what bounds it.
	MaxStartEntries = 16384

	// startWindow: the first pages of candidates within this many pages of
	// the first one looked up are read in the same pread (4 KiB of
	// pagemap, 2 MiB of address space).
	startWindow = 512

	// defaultCapacity is the profiler's default slot count: mappings of
	// exactly its size are read first when there are too many candidates.
	defaultCapacity = 65536
)

// ErrNotFound: no mapping of the process holds a valid buffer.
var ErrNotFound = errors.New("dd_otel_ctx: no buffer found")

// DiscoverStats tell what one discovery looked at, for telemetry and logs.
type DiscoverStats struct {
	// Candidates is the plausible mappings (named, or unnamed rw-p of a
	// size a buffer can have) whose first page was written; Skipped those
	// beyond MaxCandidates, or beyond the pagemap budget of the mapping
	// starts (MaxPagemapReads, MaxStartEntries).
	Candidates, Skipped int
	// Reads is the process_vm_readv calls made; Unreadable the candidates
	// that could not be read.
	Reads, Unreadable int
	// Refused counts candidates with the magic (or the name) whose header
	// was refused; FirstRefusal says why for the first of them; RefusedAt
	// holds their addresses (so that a caller looking again can tell a
	// header it counted already).
	Refused      int
	FirstRefusal error
	RefusedAt    []uint64
	// Valid counts the valid buffers found; more than one is unexpected
	// (the profiler keeps one) and the first in candidate order is used.
	Valid int
	// PagemapEntries and InsideProbes are what the search inside merged
	// mappings cost (ProbeInside): pages whose residency was looked up,
	// and written page starts read.
	PagemapEntries, InsideProbes int
	// Unwritten counts candidate mappings whose first page the process
	// never wrote (not read: it cannot hold a header).
	Unwritten int
	// PagemapReads is the preads of /proc/PID/pagemap, for the mapping
	// starts and the search inside together; StartEntries the entries
	// read for the mapping starts.
	PagemapReads, StartEntries int
}

// maxMappingSize is the largest mapping a buffer of MaxCapacity slots
// takes, rounded up to a page: larger unnamed mappings are not candidates.
func maxMappingSize() uint64 {
	page := uint64(os.Getpagesize())
	return (BufferSize(MaxCapacity) + page - 1) / page * page
}

// plausible is the candidate filter: the named mapping whatever its size
// (its header is validated against the size anyway), or an unnamed one no
// larger than the largest buffer (every mapping is at least a page, which
// holds the smallest).
func plausible(m procmaps.Mapping) bool {
	return m.Name == NamedMapping || (m.Size() >= HeaderSize && m.Size() <= maxMappingSize())
}

// Discover finds the buffer of process pid (procRoot is normally "/proc"):
// the mapping named [anon:DD_OTEL_CTX], or, where naming is unavailable, a
// private read-write anonymous mapping holding a valid header. It returns
// ErrNotFound when there is none, or the error reading maps.
//
// First the start of every candidate mapping is read (Probe): a buffer is
// mmap'ed on its own, so it starts a mapping. But the kernel merges
// adjacent anonymous mappings with the same permissions into one: a thread
// stack mapped right below the buffer later (mmap allocates top-down)
// swallows it, and the buffer then sits at a page boundary inside a larger
// mapping. If no mapping starts with a buffer, the resident pages of the
// candidate mappings are probed too (ProbeInside), within page budgets.
func Discover(procRoot string, pid int) (Buffer, DiscoverStats, error) {
	maps, err := procmaps.FindAnonymous(procRoot, pid, MappingName, nil)
	if err != nil {
		return Buffer{}, DiscoverStats{}, err
	}
	mem := remote.Memory{PID: pid}
	pm, err := openPagemap(procRoot, pid)
	if err != nil {
		return Buffer{}, DiscoverStats{}, err
	}
	// Only first pages the process wrote are read (see written). Their
	// pagemap entries are read in windows (one pread for the candidates
	// whose first pages lie within startWindow pages), within a budget of
	// preads and entries: a process can have up to vm.max_map_count
	// (65530) mappings, most of them never written.
	starts, unwritten, skipped := writtenStarts(pm, ranked(maps))
	pm.Close()
	b, st, err := Probe(mem, starts)
	st.Unwritten, st.Skipped = unwritten, st.Skipped+skipped
	st.PagemapReads, st.StartEntries = pm.reads, pm.read
	if !errors.Is(err, ErrNotFound) || st.Refused > 0 {
		// Found, failed, or a header there was refused: a refused header
		// is an answer (a broken or hostile buffer), not a reason to
		// search deeper.
		return b, st, err
	}
	b, inside, err := ProbeInside(procRoot, mem, maps)
	st.add(inside)
	return b, st, err
}

// writtenStarts returns the candidates (in rank order, at most
// MaxCandidates) whose first page the process wrote, with the counts of
// those not written and of those skipped (beyond MaxCandidates, or beyond
// the pagemap budget: MaxPagemapReads preads, MaxStartEntries entries).
// A candidate's first page is looked up in one pread with those of the
// candidates that follow it in address order within startWindow pages, so
// that a JVM's thousands of mappings cost few preads.
func writtenStarts(pm *pagemap, cands []procmaps.Mapping) (starts []procmaps.Mapping, unwritten, skipped int) {
	var pages []uint64 // the candidates' first pages, distinct, ascending
	for _, m := range cands {
		if plausible(m) {
			pages = append(pages, m.Start/pm.page)
		}
	}
	slices.Sort(pages)
	pages = slices.Compact(pages)
	ents := make([]uint64, len(pages))
	known := make([]bool, len(pages))
	for _, m := range cands {
		if !plausible(m) {
			continue
		}
		if len(starts) >= MaxCandidates {
			skipped++ // in rank order: the named and default-size ones are in
			continue
		}
		i, _ := slices.BinarySearch(pages, m.Start/pm.page)
		if !known[i] {
			left := MaxStartEntries - pm.read
			if pm.reads >= MaxPagemapReads || left < 1 {
				skipped++
				continue
			}
			j := i
			for j+1 < len(pages) && pages[j+1]-pages[i] < startWindow && int(pages[j+1]-pages[i]) < left {
				j++
			}
			e, err := pm.entries(pages[i]*pm.page, int(pages[j]-pages[i]+1))
			for k := i; k <= j; k++ {
				known[k] = true
				if err == nil {
					ents[k] = e[pages[k]-pages[i]]
				} // else: the range went away meanwhile, not written
			}
		}
		if !written(ents[i]) {
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

// ranked orders candidates (a copy): the named mapping first, then
// mappings of the default buffer's size, then the others in address order.
func ranked(maps []procmaps.Mapping) []procmaps.Mapping {
	page := uint64(os.Getpagesize())
	defSize := (BufferSize(defaultCapacity) + page - 1) / page * page
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

// Probe reads the first IdentSize bytes of each candidate mapping (at most
// MaxCandidates, in as few process_vm_readv calls as the kernel allows) and
// returns the first valid buffer in candidate order.
func Probe(mem remote.Memory, maps []procmaps.Mapping) (Buffer, DiscoverStats, error) {
	st := DiscoverStats{Candidates: len(maps)}
	if len(maps) == 0 {
		return Buffer{}, st, ErrNotFound
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
	found, err := readIdents(mem, addrs, &st, func(i int, ident []byte) (Buffer, bool, error) {
		m := cands[i]
		h, err := ParseHeader(ident, m.Size())
		if err != nil {
			// Anonymous memory without the magic is just not a buffer;
			// the magic (or the name) with a bad header is a refusal.
			if !errors.Is(err, ErrBadMagic) || m.Name == NamedMapping {
				return Buffer{}, false, fmt.Errorf("mapping %#x-%#x: %w", m.Start, m.End, err)
			}
			return Buffer{}, false, nil
		}
		return Buffer{Addr: m.Start, Capacity: h.Capacity, MappingName: m.Name}, true, nil
	})
	return found, st, err
}

// readIdents reads IdentSize bytes at each address (in as few
// process_vm_readv calls as the kernel allows) into st and returns the
// first buffer in address order. check looks at the bytes read at addrs[i]:
// a buffer (true), not a buffer (false), or a refusal (an error).
func readIdents(mem remote.Memory, addrs []uint64, st *DiscoverStats, check func(i int, ident []byte) (Buffer, bool, error)) (Buffer, error) {
	raw := make([]byte, IdentSize*len(addrs))
	bufs := make([][]byte, len(addrs))
	for i := range addrs {
		bufs[i] = raw[i*IdentSize : (i+1)*IdentSize]
	}
	ok := make([]bool, len(addrs))
	calls, err := mem.ReadEach(bufs, addrs, ok)
	st.Reads = calls
	if err != nil {
		return Buffer{}, err
	}
	var found Buffer
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
			return Buffer{}, fmt.Errorf("%w (%d refused; first: %w)", ErrNotFound, st.Refused, st.FirstRefusal)
		}
		return Buffer{}, ErrNotFound
	}
	return found, nil
}

// ErrHeaderGone: the header's page is no longer one the process wrote
// (unmapped and mapped again, or discarded with madvise).
var ErrHeaderGone = errors.New("dd_otel_ctx: header page no longer written")

// Revalidate re-reads the header of a buffer found earlier (one pagemap
// entry, then one IdentSize-byte read): it fails when the mapping is gone
// or no longer holds the same buffer, so the caller discovers again.
func Revalidate(procRoot string, mem remote.Memory, b Buffer) error {
	pm, err := openPagemap(procRoot, mem.PID)
	if err != nil {
		return err
	}
	ok, err := pm.pageWritten(b.Addr)
	pm.Close()
	if err != nil {
		return err
	}
	if !ok {
		return ErrHeaderGone
	}
	var hb [IdentSize]byte
	if err := mem.ReadAt(hb[:], b.Addr); err != nil {
		return err
	}
	// The slots of the capacity found at discovery were inside the mapping
	// then; a header that changed its capacity is a different buffer.
	h, err := ParseHeader(hb[:], BufferSize(b.Capacity))
	if err != nil {
		return err
	}
	if h.Capacity != b.Capacity {
		return fmt.Errorf("%w: capacity changed from %d to %d", ErrBadCapacity, b.Capacity, h.Capacity)
	}
	return nil
}

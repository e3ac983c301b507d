package ddotel

import (
	"encoding/binary"
	"fmt"
	"os"
	"sort"

	"github.com/otelctx/otelctx/internal/scan/procmaps"
	"github.com/otelctx/otelctx/internal/scan/remote"
)

// Budgets of the search inside merged mappings, per process and discovery.
const (
	// MaxPagemapEntries bounds the pages whose residency is looked up in
	// /proc/PID/pagemap (8 bytes each: 512 KiB read, 256 MiB of address
	// space with 4 KiB pages).
	MaxPagemapEntries = 1 << 16
	// MaxInsideProbes bounds the resident page starts read (16 bytes
	// each, remote.MaxIovecs per process_vm_readv call).
	MaxInsideProbes = 4096
	// maxInsideMapping: larger mappings (a Java heap, a huge arena) are
	// not searched; a buffer merged into one is not found.
	maxInsideMapping = 256 << 20
	// MaxPagemapReads bounds the preads of /proc/PID/pagemap per process
	// and phase of a discovery (the mapping starts; the search inside):
	// a pread per small mapping would otherwise cost one syscall for each
	// of up to vm.max_map_count (65530) mappings.
	MaxPagemapReads = 256
)

// ProbeInside looks for a buffer at the page boundaries of the given
// mappings (smallest first: a buffer merged with a thread stack or two
// makes a mapping a few MiB large), reading only pages in the process's
// page tables (pagemap: present): a buffer's header page was written, most
// pages of stacks and arenas were not. A swapped-out page is not read
// either: reading it would fault it back from swap (blocking I/O, at every
// search of a process that may have no buffer at all); a buffer whose
// header page is swapped out is found by a later search, once the writer
// touched it again. The page and pread budgets (MaxPagemapEntries,
// MaxInsideProbes, MaxPagemapReads) bound the work whatever the process's
// layout.
func ProbeInside(procRoot string, mem remote.Memory, maps []procmaps.Mapping) (Buffer, DiscoverStats, error) {
	var st DiscoverStats
	page := uint64(os.Getpagesize())
	var cands []procmaps.Mapping
	for _, m := range maps {
		if m.Size() > page && m.Size() <= maxInsideMapping {
			cands = append(cands, m)
		}
	}
	if len(cands) == 0 {
		return Buffer{}, st, ErrNotFound
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].Size() < cands[j].Size() })
	pm, err := openPagemap(procRoot, mem.PID)
	if err != nil {
		return Buffer{}, st, err
	}
	defer pm.Close()

	type probe struct {
		addr uint64
		m    procmaps.Mapping
	}
	var probes []probe
	for _, m := range cands {
		// The first page was looked at by Discover already.
		first, n := m.Start+page, int(m.Size()/page)-1
		if st.PagemapEntries+n > MaxPagemapEntries || len(probes) >= MaxInsideProbes || pm.reads >= MaxPagemapReads {
			break
		}
		st.PagemapEntries += n
		ents, err := pm.entries(first, n)
		if err != nil {
			// The mapping went away meanwhile.
			st.Unreadable++
			continue
		}
		for i := 0; i < n && len(probes) < MaxInsideProbes; i++ {
			if present(ents[i]) {
				probes = append(probes, probe{addr: first + uint64(i)*page, m: m})
			}
		}
	}
	st.InsideProbes = len(probes)
	st.PagemapReads = pm.reads
	if len(probes) == 0 {
		return Buffer{}, st, ErrNotFound
	}
	addrs := make([]uint64, len(probes))
	for i, p := range probes {
		addrs[i] = p.addr
	}
	found, err := readIdents(mem, addrs, &st, func(i int, ident []byte) (Buffer, bool, error) {
		p := probes[i]
		if binary.NativeEndian.Uint32(ident) != Magic {
			return Buffer{}, false, nil
		}
		// Inside a mapping, the bytes that follow the header up to the
		// mapping's end are what the slots may use.
		h, err := ParseHeader(ident, p.m.End-p.addr)
		if err != nil {
			return Buffer{}, false, fmt.Errorf("page %#x in mapping %#x-%#x: %w", p.addr, p.m.Start, p.m.End, err)
		}
		return Buffer{Addr: p.addr, Capacity: h.Capacity, MappingName: p.m.Name}, true, nil
	})
	return found, st, err
}

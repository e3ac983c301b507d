// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddscan

import (
	"encoding/binary"
	"fmt"
	"os"
	"sort"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/pagemap"
	"github.com/otelctx/otelctx/internal/proc/procmaps"
)

// Budgets per process and discovery.
const (
	// MaxPagemapEntries: 512 KiB of pagemap, 256 MiB of 4 KiB pages.
	MaxPagemapEntries = 1 << 16
	MaxInsideProbes   = 4096
	// maxInsideMapping: larger mappings (a Java heap) are not searched.
	maxInsideMapping = 256 << 20
	// MaxPagemapReads: one pread per mapping could reach vm.max_map_count.
	MaxPagemapReads = 256
)

// ProbeInside looks for a buffer merged into a larger mapping (a thread
// stack), smallest first, at present pages only: swapped pages would block
// on swap-in; a later search finds the buffer once its page is back.
func ProbeInside(procRoot string, mem Memory, maps []procmaps.Mapping) (ddotel.Buffer, DiscoverStats, error) {
	var st DiscoverStats
	page := uint64(os.Getpagesize())
	var cands []procmaps.Mapping
	for _, m := range maps {
		if m.Size() > page && m.Size() <= maxInsideMapping {
			cands = append(cands, m)
		}
	}
	if len(cands) == 0 {
		return ddotel.Buffer{}, st, ErrNotFound
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].Size() < cands[j].Size() })
	pm, err := pagemap.Open(procRoot, mem.PID())
	if err != nil {
		return ddotel.Buffer{}, st, err
	}
	defer pm.Close()

	type probe struct {
		addr uint64
		m    procmaps.Mapping
	}
	var probes []probe
	for _, m := range cands {
		first, n := m.Start+page, int(m.Size()/page)-1
		if st.PagemapEntries+n > MaxPagemapEntries || len(probes) >= MaxInsideProbes || pm.Reads >= MaxPagemapReads {
			break
		}
		if n <= 0 {
			continue
		}
		st.PagemapEntries += n
		ents, err := pm.Read(first/page, n)
		if err != nil {
			// The mapping went away meanwhile.
			st.Unreadable++
			continue
		}
		for i := 0; i < n && len(probes) < MaxInsideProbes; i++ {
			if ents[i].Present() {
				probes = append(probes, probe{addr: first + uint64(i)*page, m: m})
			}
		}
	}
	st.InsideProbes = len(probes)
	st.PagemapReads = pm.Reads
	if len(probes) == 0 {
		return ddotel.Buffer{}, st, ErrNotFound
	}
	addrs := make([]uint64, len(probes))
	for i, p := range probes {
		addrs[i] = p.addr
	}
	found, err := readIdents(mem, addrs, &st, func(i int, ident []byte) (ddotel.Buffer, bool, error) {
		p := probes[i]
		if binary.NativeEndian.Uint32(ident) != ddotel.Magic {
			return ddotel.Buffer{}, false, nil
		}
		h, err := ddotel.ParseHeader(ident, p.m.End-p.addr)
		if err != nil {
			return ddotel.Buffer{}, false, fmt.Errorf("page %#x in mapping %#x-%#x: %w", p.addr, p.m.Start, p.m.End, err)
		}
		return ddotel.Buffer{Addr: p.addr, Capacity: h.Capacity, MappingName: p.m.Name}, true, nil
	})
	return found, st, err
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"debug/elf"
	"encoding/binary"
	"math/bits"
)

// wantedSym is a name looked up in every module, with its hashes.
type wantedSym struct {
	name       string
	gnu, sysv  uint32
	staticOnly bool // only read in files without PT_INTERP
}

func newWanted(name string, staticOnly bool) wantedSym {
	return wantedSym{name: name, gnu: gnuHash(name), sysv: sysvHash(name), staticOnly: staticOnly}
}

func gnuHash(s string) uint32 {
	h := uint32(5381)
	for i := 0; i < len(s); i++ {
		h = h*33 + uint32(s[i])
	}
	return h
}

func sysvHash(s string) uint32 {
	var h uint32
	for i := 0; i < len(s); i++ {
		h = h<<4 + uint32(s[i])
		if g := h & 0xf0000000; g != 0 {
			h ^= g >> 24
		}
		h &^= 0xf0000000
	}
	return h
}

var (
	wantVar        = newWanted(SymbolName, false)
	wantNodeVar    = newWanted(NodeSymbolName, false)
	wantRDebug     = newWanted("_r_debug", false)
	wantDlDebug    = newWanted("_dl_debug_addr", false)
	wantTDBOffset  = newWanted("_thread_db_link_map_l_tls_offset", false)
	wantTDBModid   = newWanted("_thread_db_link_map_l_tls_modid", false)
	wantGlibcMarks = []wantedSym{newWanted("_IO_stdin_used", true), newWanted("__libc_setup_tls", true), newWanted("_dl_relocate_static_pie", true)}
)

// lookup finds a name the way the dynamic linker does (DT_GNU_HASH, else
// DT_HASH): the first definition wins over versioned duplicates, else the
// first entry. Without a hash table the file exports nothing findable.
func (e *elfReader) lookup(w wantedSym) (symInfo, error) {
	var found symInfo
	visit := func(i uint32) (bool, error) {
		nameOff, s, err := e.sym(i)
		if err != nil {
			return false, err
		}
		ok, err := e.nameIs(nameOff, w.name)
		if err != nil || !ok {
			return false, err
		}
		if !found.found || (found.shndx == elf.SHN_UNDEF && s.shndx != elf.SHN_UNDEF) {
			found = s
		}
		return found.shndx != elf.SHN_UNDEF, nil
	}
	var err error
	switch {
	case e.gnuHash != 0:
		err = e.walkGNU(w.gnu, visit)
	case e.hash != 0:
		err = e.walkSysV(w.sysv, visit)
	}
	return found, err
}

func (e *elfReader) u32(vaddr uint64) (uint32, error) {
	b := e.r.tmp[:4]
	err := e.readVaddr(b, vaddr)
	return binary.LittleEndian.Uint32(b), err
}

func (e *elfReader) walkSysV(h uint32, visit func(uint32) (bool, error)) error {
	nbucket, err := e.u32(e.hash)
	if err != nil {
		return err
	}
	nchain, err := e.u32(e.hash + 4)
	if err != nil || nbucket == 0 {
		return err
	}
	i, err := e.u32(e.hash + 8 + 4*uint64(h%nbucket))
	for steps := 0; err == nil && i != 0; steps++ {
		if i >= nchain || steps == maxChain {
			return malformed("DT_HASH chain (index %d of %d, step %d)", i, nchain, steps)
		}
		var done bool
		if done, err = visit(i); err != nil || done {
			return err
		}
		i, err = e.u32(e.hash + 8 + 4*uint64(nbucket) + 4*uint64(i))
	}
	return err
}

func (e *elfReader) walkGNU(h uint32, visit func(uint32) (bool, error)) error {
	hdr := e.r.tmp[:16]
	if err := e.readVaddr(hdr, e.gnuHash); err != nil {
		return err
	}
	le := binary.LittleEndian
	nbuckets, symoffset, bloomSize, bloomShift := le.Uint32(hdr), le.Uint32(hdr[4:]), le.Uint32(hdr[8:]), le.Uint32(hdr[12:])
	if nbuckets == 0 {
		return nil
	}
	bloom := e.gnuHash + 16
	if bloomSize != 0 && bits.OnesCount32(bloomSize) == 1 {
		// As ld.so: a name the filter rules out is not looked up.
		w := e.r.tmp[:8]
		if err := e.readVaddr(w, bloom+8*uint64((h/64)&(bloomSize-1))); err != nil {
			return err
		}
		word, mask := le.Uint64(w), uint64(1)<<(h%64)|uint64(1)<<((h>>(bloomShift%32))%64)
		if word&mask != mask {
			return nil
		}
	}
	buckets := bloom + 8*uint64(bloomSize)
	chains := buckets + 4*uint64(nbuckets)
	i, err := e.u32(buckets + 4*uint64(h%nbuckets))
	if err != nil || i == 0 {
		return err
	}
	if i < symoffset {
		return malformed("DT_GNU_HASH bucket %d below symoffset %d", i, symoffset)
	}
	for steps := 0; ; steps++ {
		if steps == maxChain {
			return malformed("DT_GNU_HASH chain longer than %d", maxChain)
		}
		c, err := e.u32(chains + 4*uint64(i-symoffset))
		if err != nil {
			return err
		}
		if c|1 == h|1 {
			if done, err := visit(i); err != nil || done {
				return err
			}
		}
		if c&1 != 0 {
			return nil
		}
		if i++; i == 0 {
			return malformed("DT_GNU_HASH chain wraps")
		}
	}
}

func (e *elfReader) readDynsyms(ef *elfFacts) error {
	var err error
	look := func(dst *symInfo, w wantedSym) {
		if err == nil {
			*dst, err = e.lookup(w)
		}
	}
	var v, node symInfo
	look(&v, wantVar)
	look(&node, wantNodeVar)
	// A module defining both is read as OTEP 4947's.
	switch {
	case defined(v) || (v.found && !node.found):
		ef.sym, ef.symName = v, SymbolName
	case node.found:
		ef.sym, ef.symName = node, NodeSymbolName
	}
	look(&ef.rDebug, wantRDebug)
	look(&ef.dlDebugAddr, wantDlDebug)
	look(&ef.tdbTLSOff, wantTDBOffset)
	look(&ef.tdbTLSModid, wantTDBModid)
	if !ef.hasInterp {
		for _, w := range wantGlibcMarks {
			var s symInfo
			if look(&s, w); defined(s) {
				ef.glibcMarker = true
			}
		}
	}
	return err
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// The reader of the files a target maps. It reads only what resolution
// needs (ELF and program headers, PT_DYNAMIC, symbols found through the
// dynamic linker's own hash tables, TLS relocations, the .symtab section
// header) and compares names in place, so what it allocates is fixed
// whatever the file claims: no string per symbol or section, no table
// held whole. Everything is little-endian ELFCLASS64, x86-64 or aarch64.

const (
	ehdrSize = 64
	phdrSize = 56
	shdrSize = 64
	symSize  = 24
	relaSize = 24

	// maxPhdrs: real files have about ten; all of them fit in the scratch.
	maxPhdrs = 256
	// maxLoads: PT_LOAD segments kept for address translation.
	maxLoads = 16
	// maxDynEntries: real dynamic sections hold fewer than a hundred.
	maxDynEntries = 4096
	// maxChain bounds one hash chain walk (a cyclic SysV chain, a GNU
	// chain without its end bit).
	maxChain = 1 << 14
	// maxShdrs bounds the section header scan for .symtab.
	maxShdrs = 1 << 16
)

// Dynamic tags read (elf.h).
const (
	dtPLTRELSZ  = 2
	dtHash      = 4
	dtStrtab    = 5
	dtSymtab    = 6
	dtRela      = 7
	dtRelasz    = 8
	dtRelaent   = 9
	dtStrsz     = 10
	dtSyment    = 11
	dtPLTREL    = 20
	dtJmprel    = 23
	dtGNUHash   = 0x6ffffef5
	dtRelacount = 0x6ffffff9
)

// errMalformed: a file no dynamic linker would load (truncated, offsets
// past its end, tables out of bounds, cyclic chains). Like a file that is
// not ELF at all, it cannot hold the target's variable and is skipped.
var errMalformed = fmt.Errorf("%w: malformed", errNotELF)

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errMalformed}, a...)...)
}

type loadSeg struct{ vaddr, off, filesz uint64 }

// elfReader holds one file's headers while it is parsed; its buffers are
// the resolution's (scratch), so parsing a file allocates nothing but the
// facts it keeps.
type elfReader struct {
	r     *blockReader
	size  uint64 // the file's size (stat): no offset past it is read
	arch  Arch
	loads [maxLoads]loadSeg
	nload int

	// From PT_DYNAMIC (virtual addresses, 0: absent).
	symtab, strtab, strsz, hash, gnuHash uint64
	rela, relasz, relacount              uint64
	jmprel, pltrelsz                     uint64
	pltrelIsRela                         bool
}

// parseELF reads a file's facts; src counts the bytes read (the file's
// read budget) and stops when the resolution is abandoned; mem accounts
// what the facts and buffers cost.
func parseELF(src io.ReaderAt, size uint64, mem *memBudget) (*elfFacts, error) {
	br, err := newBlockReader(src, size, mem)
	if err != nil {
		return nil, err
	}
	return parseELFWith(br, size, mem)
}

func parseELFWith(br *blockReader, size uint64, mem *memBudget) (*elfFacts, error) {
	e := &elfReader{r: br, size: size}
	h := br.tmp[:ehdrSize]
	if err := e.read(h, 0); err != nil {
		if errors.Is(err, errMalformed) {
			return nil, errNotELF
		}
		return nil, err
	}
	if string(h[:4]) != elf.ELFMAG {
		return nil, errNotELF
	}
	if elf.Class(h[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(h[elf.EI_DATA]) != elf.ELFDATA2LSB {
		return nil, fmt.Errorf("%w: %v %v (only little-endian ELFCLASS64 is read)", errNotELF, elf.Class(h[elf.EI_CLASS]), elf.Data(h[elf.EI_DATA]))
	}
	le := binary.LittleEndian
	machine := elf.Machine(le.Uint16(h[18:]))
	switch machine {
	case elf.EM_X86_64:
		e.arch = AMD64
	case elf.EM_AARCH64:
		e.arch = ARM64
	default:
		return nil, fmt.Errorf("%w: machine %v (only x86-64 and aarch64 are read)", errNotELF, machine)
	}
	if err := mem.take(factsCost); err != nil {
		return nil, err
	}
	ef := &elfFacts{arch: e.arch, typ: elf.Type(le.Uint16(h[16:]))}
	phoff, phentsize, phnum := le.Uint64(h[32:]), le.Uint16(h[54:]), int(le.Uint16(h[56:]))
	shoff, shentsize, shnum := le.Uint64(h[40:]), le.Uint16(h[58:]), int(le.Uint16(h[60:]))
	if phnum > 0 && phentsize != phdrSize {
		return nil, malformed("program header size %d", phentsize)
	}
	if phnum > maxPhdrs {
		return nil, malformed("%d program headers", phnum)
	}
	if err := e.readProgs(ef, phoff, phnum); err != nil {
		return nil, err
	}
	if shnum > 0 && shentsize == shdrSize {
		if err := e.findSymtab(ef, shoff, shnum); err != nil {
			return nil, err
		}
	}
	if !ef.hasDynamic || e.symtab == 0 || e.strtab == 0 {
		return ef, nil // nothing exported: cannot define the variable
	}
	if err := e.readDynsyms(ef); err != nil {
		return nil, err
	}
	for i, sym := range []symInfo{ef.tdbTLSOff, ef.tdbTLSModid} {
		if defined(sym) {
			b := make([]byte, tdbFieldSize) // accounted in factsCost
			if off, ok := e.fileOff(sym.value, tdbFieldSize); ok && e.read(b, off) == nil {
				ef.tdbFields[i] = b
			}
		}
	}
	if err := e.scanRelocs(ef); err != nil {
		return nil, err
	}
	return ef, nil
}

// factsCost is what one file's facts keep (elfFacts, its two descriptors,
// the cache entry), accounted when a file is parsed.
const factsCost = 512

// read fills p from off, refusing what lies past the file's end.
func (e *elfReader) read(p []byte, off uint64) error {
	if off > e.size || uint64(len(p)) > e.size-off {
		return malformed("%d bytes at %#x past the end (%d bytes)", len(p), off, e.size)
	}
	return e.r.readAt(p, off)
}

func (e *elfReader) readProgs(ef *elfFacts, phoff uint64, phnum int) error {
	if phnum == 0 {
		return nil
	}
	b := e.r.scratch[:phnum*phdrSize]
	if err := e.read(b, phoff); err != nil {
		return err
	}
	le := binary.LittleEndian
	var dynOff, dynSz uint64
	first := true
	for i := 0; i < phnum; i++ {
		p := b[i*phdrSize : (i+1)*phdrSize]
		typ := elf.ProgType(le.Uint32(p))
		off, vaddr, filesz, memsz, align := le.Uint64(p[8:]), le.Uint64(p[16:]), le.Uint64(p[32:]), le.Uint64(p[40:]), le.Uint64(p[48:])
		switch typ {
		case elf.PT_LOAD:
			if first || vaddr < ef.minLoad {
				ef.minLoad = vaddr
			}
			first = false
			if e.nload == maxLoads {
				return malformed("more than %d PT_LOAD segments", maxLoads)
			}
			e.loads[e.nload] = loadSeg{vaddr: vaddr, off: off, filesz: filesz}
			e.nload++
		case elf.PT_INTERP:
			ef.hasInterp = true
		case elf.PT_DYNAMIC:
			ef.hasDynamic = true
			ef.dynVaddr = vaddr
			dynOff, dynSz = off, filesz
		case elf.PT_TLS:
			ef.tls = &tlsSeg{vaddr: vaddr, filesz: filesz, memsz: memsz, align: align} // in factsCost
		case elf.PT_NOTE:
			if filesz <= 4096 && !ef.glibcMarker {
				// The scratch past the program headers holds the note.
				nb := e.r.scratch[maxPhdrs*phdrSize : maxPhdrs*phdrSize+int(filesz)]
				if e.read(nb, off) == nil && hasGNUABITag(nb) {
					ef.glibcMarker = true
				}
			}
		}
	}
	if ef.hasDynamic {
		return e.readDynamic(dynOff, dynSz)
	}
	return nil
}

func (e *elfReader) readDynamic(off, size uint64) error {
	le := binary.LittleEndian
	var relaent, syment uint64 = relaSize, symSize
	ent := e.r.tmp[:16]
	n := min(size/16, maxDynEntries)
	for i := uint64(0); i < n; i++ {
		if err := e.read(ent, off+16*i); err != nil {
			return err
		}
		tag, val := le.Uint64(ent[:]), le.Uint64(ent[8:])
		switch tag {
		case 0:
			i = n
		case dtSymtab:
			e.symtab = val
		case dtStrtab:
			e.strtab = val
		case dtStrsz:
			e.strsz = val
		case dtSyment:
			syment = val
		case dtHash:
			e.hash = val
		case dtGNUHash:
			e.gnuHash = val
		case dtRela:
			e.rela = val
		case dtRelasz:
			e.relasz = val
		case dtRelaent:
			relaent = val
		case dtRelacount:
			e.relacount = val
		case dtJmprel:
			e.jmprel = val
		case dtPLTRELSZ:
			e.pltrelsz = val
		case dtPLTREL:
			e.pltrelIsRela = val == dtRela
		}
	}
	if syment != symSize || relaent != relaSize {
		return malformed("DT_SYMENT %d, DT_RELAENT %d", syment, relaent)
	}
	return nil
}

// fileOff translates a virtual address into the file offset of n bytes
// inside one PT_LOAD's file image.
func (e *elfReader) fileOff(vaddr, n uint64) (uint64, bool) {
	for _, l := range e.loads[:e.nload] {
		if vaddr < l.vaddr || vaddr-l.vaddr > l.filesz || l.filesz-(vaddr-l.vaddr) < n {
			continue
		}
		off := l.off + (vaddr - l.vaddr)
		if off < l.off || off > e.size || e.size-off < n {
			return 0, false
		}
		return off, true
	}
	return 0, false
}

// readVaddr reads p at a virtual address.
func (e *elfReader) readVaddr(p []byte, vaddr uint64) error {
	off, ok := e.fileOff(vaddr, uint64(len(p)))
	if !ok {
		return malformed("%d bytes at address %#x not in the file", len(p), vaddr)
	}
	return e.read(p, off)
}

// sym reads .dynsym entry i.
func (e *elfReader) sym(i uint32) (nameOff uint32, s symInfo, err error) {
	b := e.r.tmp[8 : 8+symSize]
	if err := e.readVaddr(b, e.symtab+uint64(i)*symSize); err != nil {
		return 0, symInfo{}, err
	}
	return decodeSym(b)
}

func decodeSym(b []byte) (uint32, symInfo, error) {
	le := binary.LittleEndian
	info, other := b[4], b[5]
	return le.Uint32(b), symInfo{found: true, typ: elf.ST_TYPE(info), bind: elf.ST_BIND(info), vis: elf.ST_VISIBILITY(other),
		shndx: elf.SectionIndex(le.Uint16(b[6:])), value: le.Uint64(b[8:]), size: le.Uint64(b[16:])}, nil
}

// nameIs compares the NUL-terminated name at .dynstr offset off with want
// without copying it: len(want)+1 bytes are read, whatever its length.
func (e *elfReader) nameIs(off uint32, want string) (bool, error) {
	n := uint64(len(want)) + 1
	if e.strsz != 0 && (uint64(off) > e.strsz || e.strsz-uint64(off) < n) {
		return false, nil
	}
	b := e.r.name[:n]
	at, ok := e.fileOff(e.strtab+uint64(off), n)
	if !ok {
		return false, nil // the name runs past the file: not this one
	}
	if err := e.read(b, at); err != nil {
		return false, err
	}
	return string(b[:len(want)]) == want && b[len(want)] == 0, nil
}

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

// scanRelocs reads DT_RELA (past its leading DT_RELACOUNT relative ones)
// and DT_JMPREL (lazily bound TLSDESC lives there). Only the TLS kinds
// name a symbol worth looking at; its name is compared in place.
func (e *elfReader) scanRelocs(ef *elfFacts) error {
	desc, mod, off, tpoff := tlsRelocTypes(e.arch)
	// Relocations name the same few symbols over and over.
	var lastSym uint32
	var lastName string
	classify := func(typ, rsym uint32) error {
		if typ != desc && typ != mod && typ != off && typ != tpoff {
			return nil
		}
		if rsym == 0 {
			classifyReloc(&ef.relocs, e.arch, typ, 0, 1)
			return nil
		}
		if rsym != lastSym {
			lastSym, lastName = rsym, ""
			nameOff, s, err := e.sym(rsym)
			if err != nil {
				if errors.Is(err, errMalformed) {
					return nil // past the table: names nothing
				}
				return err
			}
			for _, n := range []string{SymbolName, NodeSymbolName} {
				ok, err := e.nameIs(nameOff, n)
				if err != nil {
					return err
				}
				if ok {
					lastName = n
					// An undefined reference is not in DT_GNU_HASH: the
					// relocation is where it shows (only reported when no
					// module defines the variable).
					if !ef.sym.found {
						ef.sym, ef.symName = s, n
					}
					break
				}
			}
		}
		switch lastName {
		case SymbolName:
			classifyReloc(&ef.relocs, e.arch, typ, 1, 1)
		case NodeSymbolName:
			classifyReloc(&ef.nodeRelocs, e.arch, typ, 1, 1)
		}
		return nil
	}
	skip := min(e.relacount, e.relasz/relaSize) * relaSize
	if err := e.scanRela(e.rela+skip, e.relasz-skip, classify); err != nil {
		return err
	}
	if e.pltrelIsRela {
		return e.scanRela(e.jmprel, e.pltrelsz, classify)
	}
	return nil
}

func tlsRelocTypes(a Arch) (desc, mod, off, tpoff uint32) {
	if a == ARM64 {
		return rAArch64TLSDESC, rAArch64DTPMOD64, rAArch64DTPREL64, rAArch64TPREL64
	}
	return rX8664TLSDESC, rX8664DTPMOD64, rX8664DTPOFF64, rX8664TPOFF64
}

// scanRela reads a relocation table in scratch-sized chunks.
func (e *elfReader) scanRela(vaddr, size uint64, each func(typ, sym uint32) error) error {
	if vaddr == 0 || size < relaSize {
		return nil
	}
	size -= size % relaSize
	start, ok := e.fileOff(vaddr, size)
	if !ok {
		return malformed("relocation table at %#x (%d bytes) not in the file", vaddr, size)
	}
	chunk := len(e.r.scratch) / relaSize * relaSize
	for done := uint64(0); done < size; {
		n := min(size-done, uint64(chunk))
		b := e.r.scratch[:n]
		if err := e.r.readDirect(b, start+done); err != nil {
			return err
		}
		for i := 0; i+relaSize <= len(b); i += relaSize {
			info := binary.LittleEndian.Uint64(b[i+8:])
			if err := each(uint32(info), uint32(info>>32)); err != nil {
				return err
			}
		}
		done += n
	}
	return nil
}

// findSymtab records where .symtab and its string table are (read only if
// nothing exports the variable); nothing when there is none.
func (e *elfReader) findSymtab(ef *elfFacts, shoff uint64, shnum int) error {
	le := binary.LittleEndian
	shAt := func(i uint64) ([]byte, error) {
		sh := e.r.tmp[:shdrSize]
		return sh, e.read(sh, shoff+i*shdrSize)
	}
	if shnum > maxShdrs {
		return nil
	}
	chunk := len(e.r.scratch) / shdrSize
	for base := 0; base < shnum; base += chunk {
		n := min(shnum-base, chunk)
		b := e.r.scratch[:n*shdrSize]
		if err := e.read(b, shoff+uint64(base)*shdrSize); err != nil {
			return nil // no usable section headers: as if stripped
		}
		for i := 0; i < n; i++ {
			s := b[i*shdrSize : (i+1)*shdrSize]
			if elf.SectionType(le.Uint32(s[4:])) != elf.SHT_SYMTAB {
				continue
			}
			flags, off, size, link, entsize := le.Uint64(s[8:]), le.Uint64(s[24:]), le.Uint64(s[32:]), le.Uint32(s[40:]), le.Uint64(s[56:])
			if entsize != symSize || flags&uint64(elf.SHF_COMPRESSED) != 0 || int(link) >= shnum {
				return nil
			}
			str, err := shAt(uint64(link))
			if err != nil {
				return nil
			}
			if elf.SectionType(le.Uint32(str[4:])) == elf.SHT_STRTAB && le.Uint64(str[8:])&uint64(elf.SHF_COMPRESSED) == 0 {
				ef.symtab = &symtabRef{off: off, size: size, strOff: le.Uint64(str[24:]), strSz: le.Uint64(str[32:])} // in factsCost
			}
			return nil
		}
	}
	return nil
}

// hasGNUABITag: glibc's start files carry .note.ABI-tag, musl's do not.
func hasGNUABITag(b []byte) bool {
	for len(b) >= 12 {
		namesz, descsz, typ := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])
		nameEnd := 12 + (uint64(namesz)+3)&^3
		end := nameEnd + (uint64(descsz)+3)&^3
		if end > uint64(len(b)) {
			return false
		}
		if typ == 1 && namesz == 4 && string(b[12:16]) == "GNU\x00" {
			return true
		}
		b = b[end:]
	}
	return false
}

// blockReader serves the many small reads of hash walks from a few cached
// blocks; large reads (relocation tables, .symtab) go straight to the file
// into the scratch. Its buffers are allocated once per resolution.
type blockReader struct {
	src     io.ReaderAt
	scratch []byte // relocation and section header chunks, program headers + a note
	name    []byte // a wanted name and its NUL
	tmp     []byte // a header, an entry, a word
	blocks  [nBlocks]cachedBlock
	mem     []byte
}

const (
	blockSize   = 4096
	nBlocks     = 8
	scratchSize = 32 << 10
	// readerCost is what newBlockReader allocates.
	readerCost = scratchSize + nBlocks*blockSize + 64 + ehdrSize + 256
)

type cachedBlock struct {
	off   uint64
	n     int // valid bytes; 0: empty
	valid bool
}

func newBlockReader(src io.ReaderAt, size uint64, mem *memBudget) (*blockReader, error) {
	if err := mem.take(readerCost); err != nil {
		return nil, err
	}
	return &blockReader{src: src, scratch: make([]byte, scratchSize), name: make([]byte, 64), tmp: make([]byte, ehdrSize), mem: make([]byte, nBlocks*blockSize)}, nil
}

// reset points the reader at another file, keeping its buffers.
func (b *blockReader) reset(src io.ReaderAt) {
	b.src = src
	b.blocks = [nBlocks]cachedBlock{}
}

func (b *blockReader) readDirect(p []byte, off uint64) error {
	if off > 1<<62 {
		return malformed("offset %#x", off)
	}
	n, err := b.src.ReadAt(p, int64(off))
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		return malformed("short read at %#x", off)
	}
	return err
}

func (b *blockReader) readAt(p []byte, off uint64) error {
	if len(p) > blockSize/2 {
		return b.readDirect(p, off)
	}
	for len(p) > 0 {
		blk := off / blockSize
		slot := &b.blocks[blk%nBlocks]
		buf := b.mem[(blk%nBlocks)*blockSize : (blk%nBlocks+1)*blockSize]
		if !slot.valid || slot.off != blk*blockSize {
			n, err := b.src.ReadAt(buf, int64(blk*blockSize))
			if n == 0 && err != nil && err != io.EOF {
				return err
			}
			*slot = cachedBlock{off: blk * blockSize, n: n, valid: true}
		}
		in := int(off - slot.off)
		if in >= slot.n {
			return malformed("short read at %#x", off)
		}
		c := copy(p, buf[in:slot.n])
		p, off = p[c:], off+uint64(c)
	}
	return nil
}

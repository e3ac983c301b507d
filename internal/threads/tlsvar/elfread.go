// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The reader of the files a target maps. It reads only what resolution
// needs (ELF and program headers, PT_DYNAMIC, symbols found through the
// dynamic linker's own hash tables, TLS relocations, the .symtab section
// header) and compares names in place, so what it allocates is fixed
// whatever the file claims: no string per symbol or section, no table
// held whole. Everything is little-endian ELFCLASS64, x86-64 or aarch64.
// debug/elf is imported for its constants and types only.

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
		if off, ok := e.fileOff(sym.value, tdbFieldSize); defined(sym) && ok {
			b := make([]byte, tdbFieldSize) // accounted in factsCost
			err := e.read(b, off)
			if err == nil {
				ef.tdbFields[i] = b
			} else if err = optional(err); err != nil {
				return nil, err
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

// optional is the outcome of a read whose fact may be absent: a malformed
// place means absent, but any other failure (the resolution abandoned, the
// read budget, I/O) fails the parse, lest the facts kept for the file miss
// what the read would have found.
func optional(err error) error {
	if errors.Is(err, errMalformed) {
		return nil
	}
	return err
}

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
				err := e.read(nb, off)
				if err == nil && hasGNUABITag(nb) {
					ef.glibcMarker = true
				} else if err = optional(err); err != nil {
					return err
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

// inFile: n bytes at off lie in the file.
func (e *elfReader) inFile(off, n uint64) bool { return off <= e.size && n <= e.size-off }

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
	nameOff, s = decodeSym(b)
	return nameOff, s, nil
}

func decodeSym(b []byte) (uint32, symInfo) {
	le := binary.LittleEndian
	info, other := b[4], b[5]
	return le.Uint32(b), symInfo{found: true, typ: elf.ST_TYPE(info), bind: elf.ST_BIND(info), vis: elf.ST_VISIBILITY(other),
		shndx: elf.SectionIndex(le.Uint16(b[6:])), value: le.Uint64(b[8:]), size: le.Uint64(b[16:])}
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
			return optional(err) // malformed: no usable section headers, as if stripped
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
				return optional(err)
			}
			strOff, strSz := le.Uint64(str[24:]), le.Uint64(str[32:])
			// Tables past the end: as if stripped (a kept answer), not reads
			// that fail (a negative offset) at every resolution.
			if elf.SectionType(le.Uint32(str[4:])) == elf.SHT_STRTAB && le.Uint64(str[8:])&uint64(elf.SHF_COMPRESSED) == 0 &&
				e.inFile(off, size) && e.inFile(strOff, strSz) {
				ef.symtab = &symtabRef{off: off, size: size, strOff: strOff, strSz: strSz} // in factsCost
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

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"strings"
)

// hostileSpec shapes a file a publisher may map to exhaust its reader:
// every symbol and section named by one long string (debug/elf copied each
// name: names × length bytes), tables overlapping each other, and knobs
// for cyclic or endless hash chains.
type hostileSpec struct {
	machine  elf.Machine
	nameLen  int // the one long name
	nSyms    int // .dynsym entries, all named by it
	nSects   int // section headers, all named by it
	gnuHash  bool
	cyclic   bool // DT_HASH: the chain loops 1 → 2 → 1; DT_GNU_HASH: no end bit
	withVar  bool // also define otel_thread_ctx_v1 (entry 1)
	relaSize uint64
}

// hostileELF lays the file out as: header, program headers (PT_LOAD over
// the whole file, PT_DYNAMIC, PT_TLS), .dynstr (the long name; also the
// section name table), .dynsym, the hash table, the dynamic section,
// section headers. Virtual addresses equal file offsets.
func hostileELF(s hostileSpec) []byte {
	le := binary.LittleEndian
	const nph = 3
	off := uint64(ehdrSize + nph*phdrSize)
	long := strings.Repeat("A", s.nameLen)
	strtab := "\x00" + long + "\x00" + SymbolName + "\x00"
	varName := uint32(1 + s.nameLen + 1)
	strOff := off
	off += uint64(len(strtab))
	off = (off + 7) &^ 7
	symOff := off
	nsym := 1 + s.nSyms
	if s.withVar {
		nsym++
	}
	syms := make([]byte, 24*nsym)
	for i := 1; i < nsym; i++ {
		e := syms[24*i:]
		le.PutUint32(e, 1)
		e[4] = byte(elf.STB_GLOBAL)<<4 | byte(elf.STT_TLS)
		le.PutUint16(e[6:], 1)
		le.PutUint64(e[16:], 8)
	}
	if s.withVar {
		le.PutUint32(syms[24:], varName)
		le.PutUint64(syms[24+8:], 0x10)
	}
	off += uint64(len(syms))
	hashOff := off
	var hash bytes.Buffer
	if s.gnuHash {
		putLE(&hash, [4]uint32{1, 1, 1, 6})
		putLE(&hash, ^uint64(0))
		putLE(&hash, uint32(1))
		hl := gnuHash(long)
		for i := 1; i < nsym; i++ {
			h := hl &^ 1
			if i == 1 && s.withVar {
				h = gnuHash(SymbolName) &^ 1
			}
			if i == nsym-1 && !s.cyclic {
				h |= 1
			}
			putLE(&hash, h)
		}
	} else {
		putLE(&hash, [2]uint32{1, uint32(nsym)})
		putLE(&hash, uint32(min(1, nsym-1)))
		for i := 0; i < nsym; i++ {
			next := uint32(i + 1)
			switch {
			case s.cyclic && i == 2:
				next = 1
			case i == 0 || i+1 == nsym:
				next = 0
			}
			putLE(&hash, next)
		}
	}
	off += uint64(hash.Len())
	off = (off + 7) &^ 7
	dynOff := off
	hashTag := uint64(dtHash)
	if s.gnuHash {
		hashTag = dtGNUHash
	}
	var dyn bytes.Buffer
	// The relocation table overlaps the symbol table.
	for _, d := range [][2]uint64{{dtStrtab, strOff}, {dtStrsz, uint64(len(strtab))}, {dtSymtab, symOff}, {dtSyment, 24},
		{hashTag, hashOff}, {dtRela, symOff}, {dtRelasz, s.relaSize}, {dtRelaent, 24}, {0, 0}} {
		putLE(&dyn, d)
	}
	off += uint64(dyn.Len())
	shOff := (off + 63) &^ 63
	nsect := 3 + s.nSects
	end := shOff + uint64(nsect*shdrSize)

	var out bytes.Buffer
	hdr := elf.Header64{Type: uint16(elf.ET_DYN), Machine: uint16(s.machine), Version: 1, Phoff: ehdrSize, Shoff: shOff,
		Ehsize: ehdrSize, Phentsize: phdrSize, Phnum: nph, Shentsize: shdrSize, Shnum: uint16(min(nsect, 0xff00)), Shstrndx: 2}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS], hdr.Ident[elf.EI_DATA], hdr.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	putLE(&out, hdr)
	for _, p := range []elf.Prog64{
		{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R), Filesz: end, Memsz: end, Align: 0x1000},
		{Type: uint32(elf.PT_DYNAMIC), Flags: uint32(elf.PF_R), Off: dynOff, Vaddr: dynOff, Filesz: uint64(dyn.Len()), Memsz: uint64(dyn.Len()), Align: 8},
		{Type: uint32(elf.PT_TLS), Flags: uint32(elf.PF_R), Vaddr: 0x10, Memsz: 0x20, Align: 8},
	} {
		putLE(&out, p)
	}
	out.WriteString(strtab)
	pad(&out, symOff)
	out.Write(syms)
	out.Write(hash.Bytes())
	pad(&out, dynOff)
	out.Write(dyn.Bytes())
	pad(&out, shOff)
	putLE(&out, elf.Section64{})
	putLE(&out, elf.Section64{Name: 1, Type: uint32(elf.SHT_DYNSYM), Flags: uint64(elf.SHF_ALLOC), Addr: symOff, Off: symOff, Size: uint64(len(syms)), Link: 2, Info: 1, Addralign: 8, Entsize: 24})
	putLE(&out, elf.Section64{Name: 1, Type: uint32(elf.SHT_STRTAB), Flags: uint64(elf.SHF_ALLOC), Addr: strOff, Off: strOff, Size: uint64(len(strtab)), Addralign: 1})
	for i := 0; i < s.nSects; i++ {
		putLE(&out, elf.Section64{Name: 1, Type: uint32(elf.SHT_PROGBITS), Off: strOff, Size: uint64(len(strtab))})
	}
	return out.Bytes()
}

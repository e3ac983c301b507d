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

const (
	rX8664DTPMOD64 = 16
	rX8664DTPOFF64 = 17
	rX8664TPOFF64  = 18
	rX8664TLSDESC  = 36

	rAArch64DTPMOD64 = 1028
	rAArch64DTPREL64 = 1029
	rAArch64TPREL64  = 1030
	rAArch64TLSDESC  = 1031
)

// tlsRelocs: which TLS relocation kinds name the variable in one file.
type tlsRelocs struct {
	tlsdesc, dtpmod, dtpoff, tpoff bool
	// dtpmodLocal: a DTPMOD64 without symbol, the linker's output for Local
	// Dynamic (and for GD/TLSDESC against a locally bound symbol).
	dtpmodLocal bool
}

type symInfo struct {
	found bool
	typ   elf.SymType
	bind  elf.SymBind
	vis   elf.SymVis
	shndx elf.SectionIndex
	value uint64
	size  uint64
}

type tlsSeg struct {
	vaddr, filesz, memsz, align uint64
}

// elfFacts is computed once per file (Resolver's cache): parsing .dynsym
// and relocations is the expensive part.
type elfFacts struct {
	arch       Arch
	typ        elf.Type
	hasInterp  bool
	minLoad    uint64
	dynVaddr   uint64
	hasDynamic bool
	tls        *tlsSeg

	sym     symInfo // otel_thread_ctx_v1, else otel_thread_ctx_nodejs_v1
	symName string  // which of the two sym is
	relocs  tlsRelocs

	// Anchors as st_value (add the load bias).
	rDebug      symInfo // glibc ld.so: struct r_debug _r_debug
	dlDebugAddr symInfo // musl: struct debug *_dl_debug_addr
	tdbTLSOff   symInfo // glibc libc: _thread_db_link_map_l_tls_offset
	tdbTLSModid symInfo // glibc libc: _thread_db_link_map_l_tls_modid
	// tdbFields are the two descriptors' 12 bytes each as the file holds
	// them (read-only data: the file is what the process maps), so that
	// placement does not read a page the process may never have touched.
	tdbFields [2][]byte
	// glibcMarker tells a static glibc executable from a static musl one.
	glibcMarker bool

	// symtab (nil: stripped) is read only when nothing exports the variable;
	// it shares the file's read budget (budgetLeft).
	symtab     *symtabRef
	budgetLeft int64
	// The .symtab answer is cached per file version (key), never a transient
	// failure; guarded by the Resolver's mutex.
	key        fileKey
	symtabDone bool
	symtabSym  symInfo
	symtabErr  error
}

type symtabRef struct {
	off, size     uint64 // .symtab
	strOff, strSz uint64 // .strtab
}

var errNotELF = errors.New("not a supported ELF file")

// hasGNUABITag: glibc's start files carry .note.ABI-tag, musl's do not.
func hasGNUABITag(r io.Reader, n uint64) bool {
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return false
	}
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

// glibcMarkers appear in a static glibc executable's .dynsym with --export-dynamic.
var glibcMarkers = map[string]bool{"_IO_stdin_used": true, "__libc_setup_tls": true, "_dl_relocate_static_pie": true}

// parseELF: the files are the target's and may be hostile; a debug/elf
// panic becomes an error.
func parseELF(r io.ReaderAt) (ef *elfFacts, err error) {
	defer func() {
		if p := recover(); p != nil {
			ef, err = nil, fmt.Errorf("%w: debug/elf panicked: %v", errNotELF, p)
		}
	}()
	return parseELFUnsafe(r)
}

func parseELFUnsafe(r io.ReaderAt) (*elfFacts, error) {
	var magic [4]byte
	if _, err := r.ReadAt(magic[:], 0); err != nil || string(magic[:]) != elf.ELFMAG {
		return nil, errNotELF
	}
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNotELF, err)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB {
		return nil, fmt.Errorf("%w: %v %v", errNotELF, f.Class, f.Data)
	}
	ef := &elfFacts{typ: f.Type}
	switch f.Machine {
	case elf.EM_X86_64:
		ef.arch = AMD64
	case elf.EM_AARCH64:
		ef.arch = ARM64
	default:
		return nil, fmt.Errorf("%w: machine %v", errNotELF, f.Machine)
	}
	readProgs(f, ef)
	// Only the headers: the table is read if ever needed.
	for _, s := range f.Sections {
		if s.Type == elf.SHT_SYMTAB && s.Entsize == 24 && s.Flags&elf.SHF_COMPRESSED == 0 && int(s.Link) < len(f.Sections) {
			str := f.Sections[s.Link]
			if str.Type == elf.SHT_STRTAB && str.Flags&elf.SHF_COMPRESSED == 0 {
				ef.symtab = &symtabRef{off: s.Offset, size: s.Size, strOff: str.Offset, strSz: str.Size}
			}
			break
		}
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		if errors.Is(err, elf.ErrNoSymbols) {
			return ef, nil // nothing exported: cannot define the variable
		}
		return nil, fmt.Errorf("reading .dynsym: %w", err)
	}
	symIndex := readDynsyms(syms, ef)
	for i, sym := range []symInfo{ef.tdbTLSOff, ef.tdbTLSModid} {
		if defined(sym) {
			ef.tdbFields[i] = readVaddr(f, sym.value, tdbFieldSize)
		}
	}
	ef.relocs, err = scanRelocs(f, ef.arch, uint32(symIndex))
	if err != nil {
		return nil, err
	}
	return ef, nil
}

// readVaddr is n bytes of the file at a virtual address in a PT_LOAD
// segment's file image, or nil.
func readVaddr(f *elf.File, vaddr uint64, n int) []byte {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || vaddr < p.Vaddr || vaddr-p.Vaddr > p.Filesz || p.Filesz-(vaddr-p.Vaddr) < uint64(n) {
			continue
		}
		b := make([]byte, n)
		if _, err := p.ReadAt(b, int64(vaddr-p.Vaddr)); err != nil {
			return nil
		}
		return b
	}
	return nil
}

func readProgs(f *elf.File, ef *elfFacts) {
	first := true
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_LOAD:
			if first || p.Vaddr < ef.minLoad {
				ef.minLoad = p.Vaddr
			}
			first = false
		case elf.PT_INTERP:
			ef.hasInterp = true
		case elf.PT_DYNAMIC:
			ef.hasDynamic = true
			ef.dynVaddr = p.Vaddr
		case elf.PT_TLS:
			ef.tls = &tlsSeg{vaddr: p.Vaddr, filesz: p.Filesz, memsz: p.Memsz, align: p.Align}
		case elf.PT_NOTE:
			if p.Filesz <= 4096 && hasGNUABITag(p.Open(), p.Filesz) {
				ef.glibcMarker = true
			}
		}
	}
}

// readDynsyms returns the variable's .dynsym index (0: not there).
func readDynsyms(syms []elf.Symbol, ef *elfFacts) int {
	symIndex := 0 // index in .dynsym (DynamicSymbols drops entry 0)
	for i, s := range syms {
		var dst *symInfo
		switch s.Name {
		case SymbolName, NodeSymbolName:
			// A module defining both is read as OTEP 4947's (first case).
			if ef.symName == SymbolName && defined(ef.sym) {
				continue
			}
			if ef.symName != s.Name {
				ef.sym = symInfo{}
			}
			ef.symName = s.Name
			dst = &ef.sym
			symIndex = i + 1
		case "_r_debug":
			dst = &ef.rDebug
		case "_dl_debug_addr":
			dst = &ef.dlDebugAddr
		case "_thread_db_link_map_l_tls_offset":
			dst = &ef.tdbTLSOff
		case "_thread_db_link_map_l_tls_modid":
			dst = &ef.tdbTLSModid
		default:
			if glibcMarkers[s.Name] && s.Section != elf.SHN_UNDEF {
				ef.glibcMarker = true
			}
			continue
		}
		if dst.found && dst.shndx != elf.SHN_UNDEF {
			continue // keep the first definition (versioned duplicates)
		}
		*dst = symInfo{found: true, typ: elf.ST_TYPE(s.Info), bind: elf.ST_BIND(s.Info),
			vis: elf.ST_VISIBILITY(s.Other), shndx: s.Section, value: s.Value, size: s.Size}
	}
	return symIndex
}

// scanRelocs reads .rela.dyn and .rela.plt (lazily bound TLSDESC lives there).
func scanRelocs(f *elf.File, arch Arch, sym uint32) (tlsRelocs, error) {
	var out tlsRelocs
	dynsym := -1
	for i, s := range f.Sections {
		if s.Type == elf.SHT_DYNSYM {
			dynsym = i
		}
	}
	if dynsym < 0 {
		return out, nil
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA || int(s.Link) != dynsym || s.Entsize != 24 {
			continue
		}
		data, err := s.Data()
		if err != nil {
			return out, fmt.Errorf("reading %q: %w", s.Name, err)
		}
		for i := 0; i+24 <= len(data); i += 24 {
			info := f.ByteOrder.Uint64(data[i+8:])
			classifyReloc(&out, arch, uint32(info&0xffffffff), uint32(info>>32), sym)
		}
	}
	return out, nil
}

func classifyReloc(out *tlsRelocs, arch Arch, typ, rsym, sym uint32) {
	var desc, mod, off, tpoff uint32
	switch arch {
	case AMD64:
		desc, mod, off, tpoff = rX8664TLSDESC, rX8664DTPMOD64, rX8664DTPOFF64, rX8664TPOFF64
	case ARM64:
		desc, mod, off, tpoff = rAArch64TLSDESC, rAArch64DTPMOD64, rAArch64DTPREL64, rAArch64TPREL64
	default:
		return
	}
	if rsym == 0 {
		if typ == mod {
			out.dtpmodLocal = true
		}
		return
	}
	if sym == 0 || rsym != sym {
		return
	}
	switch typ {
	case desc:
		out.tlsdesc = true
	case mod:
		out.dtpmod = true
	case off:
		out.dtpoff = true
	case tpoff:
		out.tpoff = true
	}
}

// symtabChunk: a large static executable's table is never held whole.
const symtabChunk = 64 << 10

// findSymtab: a GLOBAL or WEAK defined STT_TLS entry is the variable, else a
// single LOCAL one (file-static, or hidden turned local); several are ambiguous.
func findSymtab(r io.ReaderAt, ref *symtabRef) (symInfo, error) {
	var global, local symInfo
	locals := 0
	buf := make([]byte, symtabChunk)
	name := make([]byte, len(SymbolName)+1)
	for off := uint64(0); off+24 <= ref.size; {
		n := min(ref.size-off, symtabChunk) / 24 * 24
		b := buf[:n]
		if _, err := r.ReadAt(b, int64(ref.off+off)); err != nil {
			return symInfo{}, fmt.Errorf("reading .symtab: %w", err)
		}
		for i := 0; i+24 <= len(b); i += 24 {
			e := b[i : i+24]
			info, other := e[4], e[5]
			shndx := elf.SectionIndex(binary.LittleEndian.Uint16(e[6:]))
			if elf.ST_TYPE(info) != elf.STT_TLS || shndx == elf.SHN_UNDEF || shndx >= elf.SHN_LORESERVE {
				continue
			}
			st := uint64(binary.LittleEndian.Uint32(e))
			if st+uint64(len(name)) > ref.strSz {
				continue
			}
			if _, err := r.ReadAt(name, int64(ref.strOff+st)); err != nil {
				return symInfo{}, fmt.Errorf("reading .strtab: %w", err)
			}
			if string(name[:len(SymbolName)]) != SymbolName || name[len(SymbolName)] != 0 {
				continue
			}
			s := symInfo{found: true, typ: elf.STT_TLS, bind: elf.ST_BIND(info), vis: elf.ST_VISIBILITY(other), shndx: shndx,
				value: binary.LittleEndian.Uint64(e[8:]), size: binary.LittleEndian.Uint64(e[16:])}
			switch s.bind {
			case elf.STB_GLOBAL, elf.STB_WEAK:
				if !global.found {
					global = s
				}
			case elf.STB_LOCAL:
				locals++
				local = s
			}
		}
		off += n
	}
	switch {
	case global.found:
		return global, nil
	case locals == 1:
		return local, nil
	case locals > 1:
		return symInfo{}, fmt.Errorf("%w: %d file-local definitions of %s in the executable's .symtab, none global: ambiguous", ErrUnsupported, locals, SymbolName)
	}
	return symInfo{}, ErrNotFound
}

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
	// relocs name otel_thread_ctx_v1, nodeRelocs otel_thread_ctx_nodejs_v1.
	relocs, nodeRelocs tlsRelocs

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
func findSymtab(r io.ReaderAt, ref *symtabRef, mem *memBudget) (symInfo, error) {
	var global, local symInfo
	locals := 0
	if err := mem.take(symtabChunk + len(SymbolName) + 1); err != nil {
		return symInfo{}, err
	}
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

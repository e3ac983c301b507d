package tlsvar

import (
	"encoding/binary"
	"fmt"
)

// musl's struct dso (ldso/dynlink.c, 1.2.x), LP64 layout, identical on
// x86-64 and aarch64 (no DL_FDPIC there). Its first five fields mirror
// link_map (base, name, dynv, next, prev); the TLS fields are internal, so
// they are validated against the module's PT_TLS before being trusted:
//
//	0 base, 8 name, 16 dynv, 24 next, 32 prev, 40 phdr, 48 phnum (int),
//	56 phentsize, 64 syms, 72 hashtab, 80 ghashtab, 88 versym, 96 strings,
//	104 syms_next, 112 lazy_next, 120 lazy, 128 lazy_cnt, 136 map,
//	144 map_len, 152 dev, 160 ino, 168 relocated, 169 constructed,
//	170 kernel_mapped, 171 mark, 172 bfs_built, 173 runtime_loaded,
//	176 deps, 184 needed_by, 192 ndeps_direct, 200 next_dep,
//	208 ctor_visitor, 216 rpath_orig, 224 rpath,
//	232 tls {next, image, len, size, align, offset} (struct tls_module),
//	280 tls_id
const (
	dsoBase          = 0
	dsoDynv          = 16
	dsoNext          = 24
	dsoFlags         = 168 // relocated .. runtime_loaded, one char each
	dsoRuntimeLoaded = 173
	dsoTLS           = 232
	dsoTLSID         = 280
	dsoReadLen       = dsoTLSID + 8

	muslDebugHead = 8 // struct debug { int ver; void *head; ... }
)

// musl's DTV: a uintptr_t array, dtv[0] = number of modules, dtv[i] = the
// thread's block for module i. struct pthread begins {self, dtv, ...} at
// the thread pointer on x86-64; on aarch64 (TLS_ABOVE_TP) the thread
// pointer is just past struct pthread, which ends {..., canary, dtv}.
const (
	muslDTVEntry = 8
	muslDTVCount = 0
)

func muslDTVPointer(a Arch) int64 {
	if a == ARM64 {
		return -8
	}
	return 8
}

// placeMusl finds def's struct dso through _dl_debug_addr and sets the
// placement: modules loaded at start-up live at a fixed offset in every
// thread (musl's static TLS); dlopen'ed ones are found through the DTV,
// which musl fills for every thread at dlopen and thread creation.
func placeMusl(loc *Location, mem Memory, ld, def *module) error {
	dbg, err := mem.ReadUint64(ld.bias + ld.facts.dlDebugAddr.value)
	if err != nil {
		return fmt.Errorf("reading _dl_debug_addr: %w", err)
	}
	head, err := mem.ReadUint64(dbg + muslDebugHead)
	if err != nil {
		return fmt.Errorf("reading debug.head: %w", err)
	}
	var b [dsoReadLen]byte
	seen := 0
	for p := head; p != 0; seen++ {
		if seen == maxLinkMaps {
			return fmt.Errorf("%w: musl dso list longer than %d (loop?)", ErrUnsupported, maxLinkMaps)
		}
		if err := mem.ReadAt(b[:], p); err != nil {
			return fmt.Errorf("reading struct dso at %#x: %w", p, err)
		}
		if binary.NativeEndian.Uint64(b[dsoDynv:]) == def.dynAddr() && binary.NativeEndian.Uint64(b[dsoBase:]) == def.bias {
			return setMuslPlacement(loc, b[:], def.bias, def.facts.tls)
		}
		p = binary.NativeEndian.Uint64(b[dsoNext:])
	}
	return fmt.Errorf("%w: defining module (dynamic section %#x) not in musl's dso list", ErrUnsupported, def.dynAddr())
}

// setMuslPlacement validates a struct dso image against the module's
// PT_TLS and sets the recipe. Split out for the arm64 fixture tests.
func setMuslPlacement(loc *Location, dso []byte, bias uint64, seg *tlsSeg) error {
	u := func(off int) uint64 { return binary.NativeEndian.Uint64(dso[off:]) }
	image, tlen, size, align, offset := u(dsoTLS+8), u(dsoTLS+16), u(dsoTLS+24), u(dsoTLS+32), u(dsoTLS+40)
	id := u(dsoTLSID)
	for i := dsoFlags; i <= dsoRuntimeLoaded; i++ {
		if dso[i] > 1 {
			return fmt.Errorf("%w: unknown musl struct dso layout (flag byte %d is %d)", ErrUnsupported, i, dso[i])
		}
	}
	// musl copies p_filesz, p_memsz and p_align verbatim (static_init_tls
	// raises a small alignment only in static executables, not handled here).
	if tlen != seg.filesz || size != seg.memsz || align != seg.align || image != bias+seg.vaddr {
		return fmt.Errorf("%w: unknown musl struct dso layout (tls {image %#x len %d size %d align %d} does not match PT_TLS {%#x %d %d %d})",
			ErrUnsupported, image, tlen, size, align, bias+seg.vaddr, seg.filesz, seg.memsz, seg.align)
	}
	if id == 0 || id > maxDTV {
		return fmt.Errorf("%w: unknown musl struct dso layout (tls_id %d)", ErrUnsupported, id)
	}
	loc.ModuleID = id
	if dso[dsoRuntimeLoaded] == 0 && loc.Arch == AMD64 {
		// Loaded at start-up: every thread's block is tls.offset below the
		// thread pointer (musl's REL_TPOFF: st_value - tls.offset).
		if offset < size || offset > 1<<30 {
			return fmt.Errorf("%w: musl tls.offset %d with size %d", ErrUnsupported, offset, size)
		}
		loc.Placement = StaticTLS
		loc.TPOffset = -int64(offset) + int64(loc.SymOffset)
		return nil
	}
	// dlopen'ed (or aarch64, where the DTV keeps us clear of musl's
	// TLS_ABOVE_TP offset conventions): through the DTV, which musl fills
	// eagerly, so an entry is never "not yet allocated".
	loc.Placement = DynamicTLS
	loc.DTVPointerOffset = muslDTVPointer(loc.Arch)
	loc.DTVEntrySize = muslDTVEntry
	loc.DTVCountOffset = muslDTVCount
	loc.DTVUnallocated = 0
	return nil
}

// placeStaticExe handles an executable without a dynamic linker: its TLS
// block is module 1, placed by the libc's start-up code (glibc
// csu/libc-tls.c, musl src/env/__init_tls.c) by the TLS variant's rule.
func placeStaticExe(loc *Location, seg *tlsSeg) error {
	align := seg.align
	if align == 0 {
		align = 1
	}
	if align&(align-1) != 0 || align > 1<<20 {
		return fmt.Errorf("%w: PT_TLS alignment %d", ErrUnsupported, seg.align)
	}
	loc.Placement = StaticTLS
	loc.ModuleID = 1
	if loc.Arch == ARM64 {
		// Variant I: the block starts at the smallest offset >= the 16-byte
		// TCB congruent to p_vaddr modulo the alignment.
		off := uint64(16) + ((seg.vaddr - 16) & (align - 1))
		loc.TPOffset = int64(off) + int64(loc.SymOffset)
		return nil
	}
	// Variant II: the block ends at the thread pointer, starting at the
	// smallest offset >= p_memsz whose address keeps p_vaddr's alignment
	// (musl: size + (-size - image) & (align-1); glibc: the same with
	// firstbyte = -p_vaddr & (align-1)).
	off := seg.memsz + ((-seg.memsz - seg.vaddr) & (align - 1))
	loc.TPOffset = -int64(off) + int64(loc.SymOffset)
	return nil
}

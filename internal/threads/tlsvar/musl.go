// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"encoding/binary"
	"fmt"
)

// musl's struct dso (ldso/dynlink.c 1.2.x), LP64, same on x86-64 and
// aarch64; README.md lists it. The TLS fields are internal, so they are
// validated against the module's PT_TLS before being trusted.
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

// musl's DTV: dtv[0] = number of modules, dtv[i] = module i's block. The
// dtv pointer follows self at tp on x86-64, and ends struct pthread below tp
// on aarch64 (TLS_ABOVE_TP).
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

// placeMusl finds def's struct dso: modules loaded at start-up are static
// TLS; dlopen'ed ones go through the DTV, which musl fills for every thread.
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

// setMuslPlacement is split out for the arm64 fixture tests.
func setMuslPlacement(loc *Location, dso []byte, bias uint64, seg *tlsSeg) error {
	u := func(off int) uint64 { return binary.NativeEndian.Uint64(dso[off:]) }
	image, tlen, size, align, offset := u(dsoTLS+8), u(dsoTLS+16), u(dsoTLS+24), u(dsoTLS+32), u(dsoTLS+40)
	id := u(dsoTLSID)
	for i := dsoFlags; i <= dsoRuntimeLoaded; i++ {
		if dso[i] > 1 {
			return fmt.Errorf("%w: unknown musl struct dso layout (flag byte %d is %d)", ErrUnsupported, i, dso[i])
		}
	}
	// musl copies p_filesz, p_memsz and p_align verbatim.
	if tlen != seg.filesz || size != seg.memsz || align != seg.align || image != bias+seg.vaddr {
		return fmt.Errorf("%w: unknown musl struct dso layout (tls {image %#x len %d size %d align %d} does not match PT_TLS {%#x %d %d %d})",
			ErrUnsupported, image, tlen, size, align, bias+seg.vaddr, seg.filesz, seg.memsz, seg.align)
	}
	if id == 0 || id > maxDTV {
		return fmt.Errorf("%w: unknown musl struct dso layout (tls_id %d)", ErrUnsupported, id)
	}
	loc.ModuleID = id
	if dso[dsoRuntimeLoaded] == 0 && loc.Arch == AMD64 {
		// Loaded at start-up: REL_TPOFF, st_value - tls.offset.
		if offset < size || offset > 1<<30 {
			return fmt.Errorf("%w: musl tls.offset %d with size %d", ErrUnsupported, offset, size)
		}
		loc.Placement = StaticTLS
		loc.TPOffset = -int64(offset) + int64(loc.SymOffset)
		return nil
	}
	// dlopen'ed, or aarch64 (clear of TLS_ABOVE_TP conventions): the DTV,
	// filled eagerly, so never "not yet allocated".
	loc.Placement = DynamicTLS
	loc.DTVPointerOffset = muslDTVPointer(loc.Arch)
	loc.DTVEntrySize = muslDTVEntry
	loc.DTVCountOffset = muslDTVCount
	loc.DTVUnallocated = 0
	return nil
}

// placeStaticExe: without a dynamic linker the TLS block is module 1, placed
// by libc start-up (csu/libc-tls.c, __init_tls.c) by the variant's rule.
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
		// Variant I: the smallest offset >= the 16-byte TCB congruent to
		// p_vaddr modulo the alignment.
		off := uint64(16) + ((seg.vaddr - 16) & (align - 1))
		loc.TPOffset = int64(off) + int64(loc.SymOffset)
		return nil
	}
	// Variant II: the block ends at tp, starting at the smallest offset
	// >= p_memsz that keeps p_vaddr's alignment.
	off := seg.memsz + ((-seg.memsz - seg.vaddr) & (align - 1))
	loc.TPOffset = -int64(off) + int64(loc.SymOffset)
	return nil
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// glibc's public link_map prefix (<link.h>, stable ABI) and struct r_debug.
const (
	lmAddr = 0
	lmLD   = 16
	lmNext = 24

	rDebugMap = 8 // struct r_debug { int r_version; struct link_map *r_map; ... }

	dtDebug = 21 // DT_DEBUG: the executable's pointer to struct r_debug

	maxLinkMaps = 1 << 14 // bound on list walks: a loop or garbage ends here
)

// glibc TLS constants (ldsodefs.h, 2.36, same on both arches; README.md):
// l_tls_offset 0 or -1 (older: -2) means dynamic TLS; dtv_t entries are 16
// bytes, the length at dtv[-1], TLS_DTV_UNALLOCATED is (void*)-1.
const (
	glibcNoTLSOffset      = 0
	glibcForcedDynamic    = ^uint64(0)
	glibcForcedDynamicOld = ^uint64(1)
	glibcDTVEntry         = 16
	glibcDTVCount         = -16
	glibcDTVUnallocated   = ^uint64(0)
)

// glibcDTVPointer: tcbhead_t {tcb, dtv, ...} at fs_base; {dtv, ...} at TPIDR_EL0.
func glibcDTVPointer(a Arch) int64 {
	if a == ARM64 {
		return 0
	}
	return 8
}

// placeGlibc reads l_tls_offset and l_tls_modid at the offsets libc
// publishes for libthread_db.
func placeGlibc(loc *Location, mem Memory, ld, libc, exe, def *module) error {
	if libc == nil {
		return fmt.Errorf("%w: glibc without _thread_db_link_map_l_tls_offset/_modid in any loaded libc (glibc older than 2.3?)", ErrUnsupported)
	}
	offField, err := tdbField(mem, libc, 0, libc.facts.tdbTLSOff)
	if err != nil {
		return fmt.Errorf("%w: _thread_db_link_map_l_tls_offset: %w", ErrUnsupported, err)
	}
	modField, err := tdbField(mem, libc, 1, libc.facts.tdbTLSModid)
	if err != nil {
		return fmt.Errorf("%w: _thread_db_link_map_l_tls_modid: %w", ErrUnsupported, err)
	}
	head, err := glibcLinkMapHead(mem, ld, exe)
	if err != nil {
		return err
	}
	lm, err := findLinkMap(mem, head, def.dynAddr(), def.bias)
	if err != nil {
		return err
	}
	tlsOff, err := mem.ReadUint64(lm + uint64(offField))
	if err != nil {
		return fmt.Errorf("reading l_tls_offset: %w", err)
	}
	modid, err := mem.ReadUint64(lm + uint64(modField))
	if err != nil {
		return fmt.Errorf("reading l_tls_modid: %w", err)
	}
	return setGlibcPlacement(loc, tlsOff, modid)
}

// setGlibcPlacement is split out so the arm64 arithmetic is tested on x86-64.
func setGlibcPlacement(loc *Location, tlsOff, modid uint64) error {
	if modid == 0 || modid > maxDTV {
		return fmt.Errorf("%w: l_tls_modid %d of %q is not a module id", ErrUnsupported, modid, loc.Module)
	}
	loc.ModuleID = modid
	switch tlsOff {
	case glibcNoTLSOffset, glibcForcedDynamic, glibcForcedDynamicOld:
		loc.Placement = DynamicTLS
		loc.DTVPointerOffset = glibcDTVPointer(loc.Arch)
		loc.DTVEntrySize = glibcDTVEntry
		loc.DTVCountOffset = glibcDTVCount
		loc.DTVUnallocated = glibcDTVUnallocated
		return nil
	}
	if tlsOff > 1<<30 {
		return fmt.Errorf("%w: l_tls_offset %#x of %q is implausible", ErrUnsupported, tlsOff, loc.Module)
	}
	loc.Placement = StaticTLS
	if loc.Arch == ARM64 {
		// Variant I: l_tls_offset already includes the 16-byte TCB.
		loc.TPOffset = int64(tlsOff) + int64(loc.SymOffset)
	} else {
		loc.TPOffset = -int64(tlsOff) + int64(loc.SymOffset)
	}
	return nil
}

// tdbFieldSize is a DB_STRUCT_FIELD's size.
const tdbFieldSize = 12

// tdbField is descriptor i from libc's file, else from its memory.
func tdbField(mem Memory, libc *module, i int, sym symInfo) (uint32, error) {
	if b := libc.facts.tdbFields[i]; b != nil {
		return parseTDBField(b)
	}
	return readTDBField(mem, libc.bias+sym.value)
}

// readTDBField reads a DB_STRUCT_FIELD (nptl_db/db_info.c): uint32 {size in
// bits, count, byte offset}; both fields are size_t.
func readTDBField(mem Memory, addr uint64) (uint32, error) {
	var b [tdbFieldSize]byte
	if err := mem.ReadAt(b[:], addr); err != nil {
		return 0, err
	}
	return parseTDBField(b[:])
}

func parseTDBField(b []byte) (uint32, error) {
	bits, count, off := binary.NativeEndian.Uint32(b), binary.NativeEndian.Uint32(b[4:]), binary.NativeEndian.Uint32(b[8:])
	if bits != 64 || count != 1 || off > 1<<16 || off%8 != 0 {
		return 0, fmt.Errorf("unexpected descriptor {%d, %d, %d}", bits, count, off)
	}
	return off, nil
}

// glibcLinkMapHead: _r_debug from ld.so, else the executable's DT_DEBUG.
func glibcLinkMapHead(mem Memory, ld, exe *module) (uint64, error) {
	var rdebug uint64
	if ld != nil {
		rdebug = ld.bias + ld.facts.rDebug.value
	} else if exe != nil && exe.facts.hasDynamic {
		var err error
		if rdebug, err = readDTDebug(mem, exe.dynAddr()); err != nil {
			return 0, err
		}
	}
	if rdebug == 0 {
		return 0, fmt.Errorf("%w: no _r_debug and no DT_DEBUG to reach glibc's link_map list", ErrUnsupported)
	}
	head, err := mem.ReadUint64(rdebug + rDebugMap)
	if err != nil {
		return 0, fmt.Errorf("reading r_debug.r_map: %w", err)
	}
	if head == 0 {
		return 0, fmt.Errorf("%w: r_debug.r_map is NULL", ErrUnsupported)
	}
	return head, nil
}

func readDTDebug(mem Memory, dyn uint64) (uint64, error) {
	var b [16 * 64]byte
	for i := 0; i < 16; i++ { // at most 1024 entries
		if err := mem.ReadAt(b[:], dyn+uint64(i*len(b))); err != nil {
			return 0, fmt.Errorf("reading the dynamic section: %w", err)
		}
		for j := 0; j < len(b); j += 16 {
			tag, val := binary.NativeEndian.Uint64(b[j:]), binary.NativeEndian.Uint64(b[j+8:])
			switch tag {
			case 0:
				return 0, fmt.Errorf("%w: DT_DEBUG not set", ErrUnsupported)
			case dtDebug:
				return val, nil
			}
		}
	}
	return 0, errors.New("dynamic section without DT_NULL")
}

// findLinkMap matches l_ld: names differ between maps, link_map and
// symlinks, addresses do not; l_addr == bias confirms it.
func findLinkMap(mem Memory, head, dynAddr, bias uint64) (uint64, error) {
	var b [lmNext + 8]byte
	seen := 0
	for lm := head; lm != 0; seen++ {
		if seen == maxLinkMaps {
			return 0, fmt.Errorf("%w: link_map list longer than %d (loop?)", ErrUnsupported, maxLinkMaps)
		}
		if err := mem.ReadAt(b[:], lm); err != nil {
			return 0, fmt.Errorf("reading link_map at %#x: %w", lm, err)
		}
		if binary.NativeEndian.Uint64(b[lmLD:]) == dynAddr && binary.NativeEndian.Uint64(b[lmAddr:]) == bias {
			return lm, nil
		}
		lm = binary.NativeEndian.Uint64(b[lmNext:])
	}
	return 0, fmt.Errorf("%w: defining module (dynamic section %#x) not in the link_map list", ErrUnsupported, dynAddr)
}

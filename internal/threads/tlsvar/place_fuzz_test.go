// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"encoding/binary"
	"testing"
)

// fuzzBase is where the fuzzed bytes sit in the fake address space: the
// structures a dynamic linker keeps in the target (r_debug, the link_map
// list, musl's debug and dso list, the dynamic section, libthread_db's
// descriptors) are all the target's to write.
const fuzzBase = 0x7f0000000000

// fuzzImage is a fake address space of one region holding b at fuzzBase.
func fuzzImage(b []byte) *fakeMem {
	m := newFakeMem()
	m.put(fuzzBase, b)
	return m
}

func checkPlaced(t *testing.T, loc *Location) {
	t.Helper()
	switch loc.Placement {
	case StaticTLS:
	case DynamicTLS:
		if loc.ModuleID == 0 || loc.ModuleID > maxDTV {
			t.Fatalf("dynamic TLS with module id %d", loc.ModuleID)
		}
	default:
		t.Fatalf("placed without a placement: %+v", loc)
	}
}

// glibcSeed is a valid image: r_debug at 0, descriptors at 0x40 and 0x50,
// link maps at 0x100 and 0x200 (the second the defining module's, its
// l_tls_offset dynamic and l_tls_modid 3).
func glibcSeed(defDyn, defBias uint64) []byte {
	b := make([]byte, 0x200+1160)
	put := func(off int, w ...uint64) {
		for i, v := range w {
			binary.NativeEndian.PutUint64(b[off+8*i:], v)
		}
	}
	put(0, 1, fuzzBase+0x100) // r_version, r_map
	for i, off := range []uint32{1144, 1152} {
		binary.NativeEndian.PutUint32(b[0x40+16*i:], 64)
		binary.NativeEndian.PutUint32(b[0x44+16*i:], 1)
		binary.NativeEndian.PutUint32(b[0x48+16*i:], off)
	}
	put(0x100, 0x5555000000, 0, 0x5555003db0, fuzzBase+0x200) // l_addr, l_name, l_ld, l_next
	put(0x200, defBias, 0, defDyn, 0)
	put(0x200+1144, glibcForcedDynamic, 3)
	return b
}

// FuzzPlaceGlibc: whatever the target keeps at _r_debug, in its link_map
// list and its libthread_db descriptors, placement ends (bounded walk)
// with an error or a plausible location.
func FuzzPlaceGlibc(f *testing.F) {
	const defBias = 0x7f3000000000
	f.Add(glibcSeed(defBias+0x3e00, defBias), false)
	f.Add(glibcSeed(defBias+0x3e00, defBias), true)
	f.Add(glibcSeed(0, 0), false)
	f.Fuzz(func(t *testing.T, b []byte, viaDTDebug bool) {
		m := fuzzImage(b)
		libc := &module{bias: fuzzBase, facts: &elfFacts{
			tdbTLSOff:   symInfo{found: true, shndx: 1, value: 0x40},
			tdbTLSModid: symInfo{found: true, shndx: 1, value: 0x50},
		}}
		ld := &module{bias: fuzzBase, facts: &elfFacts{rDebug: symInfo{found: true, shndx: 1, value: 0}}}
		var exe *module
		if viaDTDebug {
			// No ld.so symbol: the executable's dynamic section (at the
			// image's start) names r_debug.
			ld, exe = nil, &module{bias: fuzzBase, facts: &elfFacts{hasDynamic: true}}
		}
		def := &module{path: "/lib/libotelctx_tls.so", bias: defBias, facts: &elfFacts{dynVaddr: 0x3e00, hasDynamic: true}}
		for _, arch := range []Arch{AMD64, ARM64} {
			loc := &Location{Arch: arch, Module: def.path}
			if err := placeGlibc(loc, m, ld, libc, exe, def); err == nil {
				checkPlaced(t, loc)
			}
		}
	})
}

// FuzzPlaceMusl: whatever the target keeps at _dl_debug_addr and in its
// dso list, placement ends with an error or a plausible location.
func FuzzPlaceMusl(f *testing.F) {
	const libBias = 0x7f3000000000
	seg := &tlsSeg{vaddr: 0x3df8, memsz: 8, align: 8}
	seed := make([]byte, 0x40+dsoReadLen)
	binary.NativeEndian.PutUint64(seed[0:], fuzzBase+0x10)    // _dl_debug_addr = &debug
	binary.NativeEndian.PutUint64(seed[0x18:], fuzzBase+0x40) // debug.head
	copy(seed[0x40:], muslDSO(libBias, seg, 2, 0x50, true))
	binary.NativeEndian.PutUint64(seed[0x40+dsoDynv:], libBias+0x3e00)
	f.Add(seed, uint64(0x3df8), uint64(8), uint64(8))
	f.Fuzz(func(t *testing.T, b []byte, vaddr, memsz, align uint64) {
		m := fuzzImage(b)
		ld := &module{bias: fuzzBase, facts: &elfFacts{dlDebugAddr: symInfo{found: true, shndx: 1, value: 0}}}
		def := &module{path: "/lib/libotelctx_tls.so", bias: libBias,
			facts: &elfFacts{dynVaddr: 0x3e00, hasDynamic: true, tls: &tlsSeg{vaddr: vaddr, memsz: memsz, align: align}}}
		for _, arch := range []Arch{AMD64, ARM64} {
			loc := &Location{Arch: arch, Module: def.path}
			if err := placeMusl(loc, m, ld, def); err == nil {
				checkPlaced(t, loc)
			}
		}
	})
}

// FuzzParseTDBField: any 12 bytes give a field offset or an error.
func FuzzParseTDBField(f *testing.F) {
	f.Add(glibcSeed(0, 0)[0x40:0x4c])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < tdbFieldSize {
			return
		}
		if off, err := parseTDBField(b); err == nil && (off > 1<<16 || off%8 != 0) {
			t.Fatalf("offset %d accepted", off)
		}
	})
}

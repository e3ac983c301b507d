// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// fakeMem is a target address space made of byte regions, for the layouts
// this machine cannot run (arm64) and for corrupt structures.
type fakeMem struct{ regions map[uint64][]byte }

func newFakeMem() *fakeMem { return &fakeMem{regions: map[uint64][]byte{}} }

func (m *fakeMem) put(addr uint64, b []byte) { m.regions[addr] = b }

func (m *fakeMem) putWords(addr uint64, w ...uint64) {
	b := make([]byte, 8*len(w))
	for i, v := range w {
		binary.NativeEndian.PutUint64(b[8*i:], v)
	}
	m.put(addr, b)
}

func (m *fakeMem) ReadAt(p []byte, addr uint64) error {
	for base, b := range m.regions {
		if addr >= base && addr+uint64(len(p)) <= base+uint64(len(b)) {
			copy(p, b[addr-base:])
			return nil
		}
	}
	return fmt.Errorf("fake: %d bytes at %#x not mapped", len(p), addr)
}

func (m *fakeMem) ReadUint64(addr uint64) (uint64, error) {
	var b [8]byte
	err := m.ReadAt(b[:], addr)
	return binary.NativeEndian.Uint64(b[:]), err
}

func TestSlotAddrStatic(t *testing.T) {
	for _, l := range []Location{
		{Arch: AMD64, Placement: StaticTLS, TPOffset: -152},
		{Arch: ARM64, Placement: StaticTLS, TPOffset: 16 + 0x20},
	} {
		got, err := l.SlotAddr(nil, 0x7000_0000)
		if err != nil || got != uint64(int64(0x7000_0000)+l.TPOffset) {
			t.Errorf("%v: %#x, %v", l.Arch, got, err)
		}
	}
	if _, err := (&Location{Placement: StaticTLS}).SlotAddr(nil, 0); err == nil {
		t.Error("tp 0 accepted")
	}
}

// glibcDTV lays out a glibc DTV allocation at base: [length][generation]
// [module 1]...; the thread's dtv pointer points at the generation entry.
func glibcDTV(m *fakeMem, base uint64, entries ...uint64) (dtvp uint64) {
	w := []uint64{uint64(len(entries)), 0, 7, 0} // dtv[-1].counter, dtv[0].counter (generation 7)
	for _, e := range entries {
		w = append(w, e, 0) // {val, to_free}
	}
	m.putWords(base, w...)
	return base + 16
}

func TestSlotAddrGlibcDTV(t *testing.T) {
	for _, arch := range []Arch{AMD64, ARM64} {
		t.Run(arch.String(), func(t *testing.T) {
			loc := &Location{Arch: arch, Libc: Glibc, Module: "lib"}
			if err := setGlibcPlacement(loc, glibcForcedDynamic, 3); err != nil {
				t.Fatal(err)
			}
			m := newFakeMem()
			const tp, block = 0x10000, 0x50000
			dtv := glibcDTV(m, 0x20000, 0x40000, glibcDTVUnallocated, block, glibcDTVUnallocated)
			tcb := []uint64{tp, dtv, tp} // x86-64 tcbhead_t {tcb, dtv, self}
			if arch == ARM64 {
				tcb = []uint64{dtv, 0} // aarch64 tcbhead_t {dtv, private}
			}
			m.putWords(tp, tcb...)
			loc.SymOffset = 0x18
			if got, err := loc.SlotAddr(m, tp); err != nil || got != block+0x18 {
				t.Fatalf("allocated: %#x, %v", got, err)
			}
			loc.ModuleID = 2
			if _, err := loc.SlotAddr(m, tp); !errors.Is(err, ErrNotAllocated) {
				t.Fatalf("TLS_DTV_UNALLOCATED: %v", err)
			}
			loc.ModuleID = 5 // beyond this thread's DTV: created before the module
			if _, err := loc.SlotAddr(m, tp); !errors.Is(err, ErrNotAllocated) {
				t.Fatalf("beyond length: %v", err)
			}
			loc.ModuleID = 3
			if _, err := loc.SlotAddr(m, tp+0x100); err == nil || errors.Is(err, ErrNotAllocated) {
				t.Fatalf("unreadable TCB: %v", err)
			}
		})
	}
}

func TestSlotAddrMuslDTV(t *testing.T) {
	for _, arch := range []Arch{AMD64, ARM64} {
		t.Run(arch.String(), func(t *testing.T) {
			m := newFakeMem()
			const tp, dtv, block = 0x10000, 0x30000, 0x60000
			m.putWords(dtv, 2, 0x61000, block) // dtv[0] = count
			if arch == ARM64 {
				// struct pthread ends {..., canary, dtv} right below TPIDR_EL0.
				m.putWords(tp-16, 0xcafe, dtv)
			} else {
				m.putWords(tp, tp, dtv) // struct pthread {self, dtv, ...}
			}
			loc := &Location{Arch: arch, Libc: Musl, SymOffset: 8}
			dso := muslDSO(0x1000, &tlsSeg{vaddr: 0x3000, filesz: 0, memsz: 16, align: 8}, 2, 0x100, true)
			if err := setMuslPlacement(loc, dso, 0x1000, &tlsSeg{vaddr: 0x3000, filesz: 0, memsz: 16, align: 8}); err != nil {
				t.Fatal(err)
			}
			if got, err := loc.SlotAddr(m, tp); err != nil || got != block+8 {
				t.Fatalf("%#x, %v", got, err)
			}
			loc.ModuleID = 3
			if _, err := loc.SlotAddr(m, tp); !errors.Is(err, ErrNotAllocated) {
				t.Fatalf("beyond count: %v", err)
			}
		})
	}
}

func TestSetGlibcPlacement(t *testing.T) {
	for _, tc := range []struct {
		arch      Arch
		off       uint64
		placement Placement
		tpOff     int64
	}{
		{AMD64, 0x98, StaticTLS, -0x98 + 0x10},
		{ARM64, 0x40, StaticTLS, 0x40 + 0x10}, // variant I: above the TCB
		{AMD64, glibcNoTLSOffset, DynamicTLS, 0},
		{ARM64, glibcForcedDynamic, DynamicTLS, 0},
		{AMD64, glibcForcedDynamicOld, DynamicTLS, 0},
	} {
		loc := &Location{Arch: tc.arch, SymOffset: 0x10}
		if err := setGlibcPlacement(loc, tc.off, 4); err != nil {
			t.Fatal(err)
		}
		if loc.Placement != tc.placement || loc.TPOffset != tc.tpOff || loc.ModuleID != 4 {
			t.Errorf("%v %#x: %+v", tc.arch, tc.off, loc)
		}
		if tc.placement == DynamicTLS && (loc.DTVEntrySize != 16 || loc.DTVCountOffset != -16 || loc.DTVPointerOffset != glibcDTVPointer(tc.arch)) {
			t.Errorf("%v dynamic: %+v", tc.arch, loc)
		}
	}
	if err := setGlibcPlacement(&Location{Arch: AMD64}, 0x98, 0); !errors.Is(err, ErrUnsupported) {
		t.Errorf("modid 0: %v", err)
	}
	if err := setGlibcPlacement(&Location{Arch: AMD64}, 1<<40, 1); !errors.Is(err, ErrUnsupported) {
		t.Errorf("huge offset: %v", err)
	}
}

// muslDSO builds the first bytes of a musl 1.2.x struct dso.
func muslDSO(bias uint64, seg *tlsSeg, id, offset uint64, runtimeLoaded bool) []byte {
	b := make([]byte, dsoReadLen)
	put := func(off int, v uint64) { binary.NativeEndian.PutUint64(b[off:], v) }
	put(dsoBase, bias)
	put(dsoDynv, bias+0x2000)
	b[dsoFlags] = 1 // relocated
	if runtimeLoaded {
		b[dsoRuntimeLoaded] = 1
	}
	put(dsoTLS+8, bias+seg.vaddr)
	put(dsoTLS+16, seg.filesz)
	put(dsoTLS+24, seg.memsz)
	put(dsoTLS+32, seg.align)
	put(dsoTLS+40, offset)
	put(dsoTLSID, id)
	return b
}

func TestSetMuslPlacement(t *testing.T) {
	seg := &tlsSeg{vaddr: 0x3e00, filesz: 0, memsz: 8, align: 8}
	const bias = 0x7f0000000000
	t.Run("startup-amd64", func(t *testing.T) {
		loc := &Location{Arch: AMD64, SymOffset: 0}
		if err := setMuslPlacement(loc, muslDSO(bias, seg, 2, 0x48, false), bias, seg); err != nil {
			t.Fatal(err)
		}
		if loc.Placement != StaticTLS || loc.TPOffset != -0x48 || loc.ModuleID != 2 {
			t.Errorf("%+v", loc)
		}
	})
	t.Run("startup-arm64", func(t *testing.T) {
		loc := &Location{Arch: ARM64}
		if err := setMuslPlacement(loc, muslDSO(bias, seg, 2, 0x48, false), bias, seg); err != nil {
			t.Fatal(err)
		}
		if loc.Placement != DynamicTLS || loc.DTVPointerOffset != -8 || loc.DTVEntrySize != 8 || loc.DTVCountOffset != 0 {
			t.Errorf("%+v", loc)
		}
	})
	t.Run("dlopen-amd64", func(t *testing.T) {
		loc := &Location{Arch: AMD64}
		if err := setMuslPlacement(loc, muslDSO(bias, seg, 5, 0x48, true), bias, seg); err != nil {
			t.Fatal(err)
		}
		if loc.Placement != DynamicTLS || loc.DTVPointerOffset != 8 || loc.ModuleID != 5 {
			t.Errorf("%+v", loc)
		}
	})
	bad := func(name string, mutate func(b []byte)) {
		t.Run(name, func(t *testing.T) {
			b := muslDSO(bias, seg, 2, 0x48, false)
			mutate(b)
			err := setMuslPlacement(&Location{Arch: AMD64}, b, bias, seg)
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "unknown musl struct dso layout") {
				t.Fatalf("%v", err)
			}
		})
	}
	bad("size", func(b []byte) { binary.NativeEndian.PutUint64(b[dsoTLS+24:], 9) })
	bad("image", func(b []byte) { binary.NativeEndian.PutUint64(b[dsoTLS+8:], 0) })
	bad("shifted", func(b []byte) { copy(b[dsoTLS:], b[dsoTLS+8:]) }) // a layout with one field fewer
	bad("flags", func(b []byte) { b[dsoFlags+2] = 0x55 })
	bad("id", func(b []byte) { binary.NativeEndian.PutUint64(b[dsoTLSID:], 0) })
}

func TestPlaceStaticExe(t *testing.T) {
	for _, tc := range []struct {
		arch  Arch
		seg   tlsSeg
		value uint64
		want  int64
	}{
		{AMD64, tlsSeg{vaddr: 0x12e18, memsz: 8, align: 8}, 0, -8},
		{AMD64, tlsSeg{vaddr: 0x1004, memsz: 0x10, align: 16}, 4, -28 + 4}, // tp-28 ≡ 4 (mod 16), like p_vaddr
		{AMD64, tlsSeg{vaddr: 0x2000, memsz: 0x78, align: 8}, 0x20, -0x78 + 0x20},
		{ARM64, tlsSeg{vaddr: 0x10000, memsz: 8, align: 64}, 0, 64},     // roundup(TCB 16, 64)
		{ARM64, tlsSeg{vaddr: 0x10008, memsz: 8, align: 8}, 0, 16},      // right after the TCB
		{ARM64, tlsSeg{vaddr: 0x10018, memsz: 8, align: 32}, 8, 24 + 8}, // 24 ≡ 0x18 (mod 32)
	} {
		loc := &Location{Arch: tc.arch, SymOffset: tc.value}
		seg := tc.seg
		if err := placeStaticExe(loc, &seg); err != nil {
			t.Fatal(err)
		}
		if loc.Placement != StaticTLS || loc.TPOffset != tc.want || loc.ModuleID != 1 {
			t.Errorf("%v %+v: TPOffset %d, want %d", tc.arch, tc.seg, loc.TPOffset, tc.want)
		}
	}
	if err := placeStaticExe(&Location{Arch: AMD64}, &tlsSeg{memsz: 8, align: 12}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("align 12: %v", err)
	}
}

func TestParseTDBField(t *testing.T) {
	b := make([]byte, 12)
	put := func(a, c, o uint32) {
		binary.NativeEndian.PutUint32(b, a)
		binary.NativeEndian.PutUint32(b[4:], c)
		binary.NativeEndian.PutUint32(b[8:], o)
	}
	put(64, 1, 1144) // glibc 2.36 x86-64 l_tls_offset
	if off, err := parseTDBField(b); err != nil || off != 1144 {
		t.Fatalf("%d, %v", off, err)
	}
	for _, bad := range [][3]uint32{{32, 1, 8}, {64, 2, 8}, {64, 1, 1 << 20}, {1144, 1, 64}} {
		put(bad[0], bad[1], bad[2])
		if _, err := parseTDBField(b); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// linkMaps writes a chain of link_map public prefixes {l_addr, l_name,
// l_ld, l_next, l_prev} plus an l_tls_offset/l_tls_modid pair at 1144/1152.
func linkMaps(m *fakeMem, base uint64, mods [][4]uint64) {
	for i, md := range mods { // {l_addr, l_ld, tls_offset, modid}
		addr := base + uint64(i)*0x1000
		next := uint64(0)
		if i+1 < len(mods) {
			next = addr + 0x1000
		}
		b := make([]byte, 1160)
		binary.NativeEndian.PutUint64(b[0:], md[0])
		binary.NativeEndian.PutUint64(b[16:], md[1])
		binary.NativeEndian.PutUint64(b[24:], next)
		binary.NativeEndian.PutUint64(b[1144:], md[2])
		binary.NativeEndian.PutUint64(b[1152:], md[3])
		m.put(addr, b)
	}
}

func TestPlaceGlibcFixture(t *testing.T) {
	m := newFakeMem()
	tdb := func(off uint32) []byte {
		b := make([]byte, 12)
		binary.NativeEndian.PutUint32(b, 64)
		binary.NativeEndian.PutUint32(b[4:], 1)
		binary.NativeEndian.PutUint32(b[8:], off)
		return b
	}
	const libcBias, ldBias, libBias = 0x7f1000000000, 0x7f2000000000, 0x7f3000000000
	libc := &module{bias: libcBias, facts: &elfFacts{tdbTLSOff: symInfo{found: true, shndx: 1, value: 0x100}, tdbTLSModid: symInfo{found: true, shndx: 1, value: 0x200}}}
	m.put(libcBias+0x100, tdb(1144))
	m.put(libcBias+0x200, tdb(1152))
	ld := &module{bias: ldBias, facts: &elfFacts{rDebug: symInfo{found: true, shndx: 1, value: 0x300}}}
	m.putWords(ldBias+0x300, 1, 0x9000000) // r_version, r_map
	def := &module{path: "/lib/libotelctx_tls.so", bias: libBias, facts: &elfFacts{dynVaddr: 0x3e00, hasDynamic: true}}
	linkMaps(m, 0x9000000, [][4]uint64{
		{0x5555000000, 0x5555003db0, 0, 0},        // the executable, no TLS
		{0x7f4000000000, 0x7f4000003e00, 0x88, 1}, // same l_ld offset, other bias: must not match
		{libBias, libBias + 0x3e00, glibcForcedDynamic, 3},
	})
	for _, arch := range []Arch{AMD64, ARM64} {
		loc := &Location{Arch: arch, Module: def.path}
		if err := placeGlibc(loc, m, ld, libc, nil, def); err != nil {
			t.Fatal(err)
		}
		if loc.Placement != DynamicTLS || loc.ModuleID != 3 {
			t.Errorf("%v: %+v", arch, loc)
		}
	}
	// A link_map list that loops back on itself ends with ErrUnsupported.
	m.putWords(0x9000000+0x2000+24, 0x9000000)
	def.bias = 0x1234000
	if err := placeGlibc(&Location{Arch: AMD64}, m, ld, libc, nil, def); !errors.Is(err, ErrUnsupported) {
		t.Errorf("loop: %v", err)
	}
}

func TestPlaceMuslFixture(t *testing.T) {
	m := newFakeMem()
	const ldBias, libBias = 0x7f2000000000, 0x7f3000000000
	seg := &tlsSeg{vaddr: 0x3df8, memsz: 8, align: 8}
	ld := &module{bias: ldBias, facts: &elfFacts{dlDebugAddr: symInfo{found: true, shndx: 1, value: 0x500}}}
	m.putWords(ldBias+0x500, 0xa000000) // _dl_debug_addr = &debug
	m.putWords(0xa000000, 1, 0xb000000) // debug {ver, head}
	exe := muslDSO(0x5555000000, &tlsSeg{vaddr: 0x10, memsz: 8, align: 8}, 1, 8, false)
	binary.NativeEndian.PutUint64(exe[dsoNext:], 0xb001000)
	m.put(0xb000000, exe)
	lib := muslDSO(libBias, seg, 2, 0x50, true)
	binary.NativeEndian.PutUint64(lib[dsoDynv:], libBias+0x3e00)
	m.put(0xb001000, lib)
	def := &module{path: "/lib/libotelctx_tls.so", bias: libBias, facts: &elfFacts{dynVaddr: 0x3e00, hasDynamic: true, tls: seg}}
	loc := &Location{Arch: ARM64, Module: def.path}
	if err := placeMusl(loc, m, ld, def); err != nil {
		t.Fatal(err)
	}
	if loc.Placement != DynamicTLS || loc.ModuleID != 2 || loc.DTVPointerOffset != -8 {
		t.Errorf("%+v", loc)
	}
}

// elfSpec describes a tiny ELF shared object for parseELF.
type elfSpec struct {
	machine elf.Machine
	syms    []elf.Sym64 // after the null symbol; names via symNames
	names   []string
	relocs  []elf.Rela64
	gnuHash bool // DT_GNU_HASH instead of DT_HASH
}

// fixtureDynVaddr is where buildELF's dynamic section lies (vaddr = offset).
const fixtureDynVaddr = 0x3e00

// buildELF writes a minimal ELF64 LSB shared object: one PT_LOAD mapping
// the file at address 0, a PT_DYNAMIC at 0x3e00 naming .dynsym, .dynstr,
// a hash table and .rela.dyn, a PT_TLS, and section headers. Used for
// aarch64, which this machine cannot link.
func buildELF(t testing.TB, s elfSpec) []byte {
	t.Helper()
	var dynstr bytes.Buffer
	dynstr.WriteByte(0)
	syms := []elf.Sym64{{}}
	for i, sym := range s.syms {
		sym.Name = uint32(dynstr.Len())
		dynstr.WriteString(s.names[i])
		dynstr.WriteByte(0)
		syms = append(syms, sym)
	}
	shstr := "\x00.dynstr\x00.dynsym\x00.rela.dyn\x00.shstrtab\x00"
	var symBuf, relBuf, hashBuf bytes.Buffer
	for _, sym := range syms {
		putLE(&symBuf, sym)
	}
	for _, r := range s.relocs {
		putLE(&relBuf, r)
	}
	n := uint32(len(syms))
	if s.gnuHash {
		// One bucket, every symbol hashed, a bloom filter letting all through.
		putLE(&hashBuf, [4]uint32{1, 1, 1, 6})
		putLE(&hashBuf, ^uint64(0))
		putLE(&hashBuf, uint32(1))
		for i := uint32(1); i < n; i++ {
			h := gnuHash(s.names[i-1]) &^ 1
			if i == n-1 {
				h |= 1
			}
			putLE(&hashBuf, h)
		}
	} else {
		// One bucket, the chain in symbol order.
		putLE(&hashBuf, [2]uint32{1, n})
		putLE(&hashBuf, uint32(min(1, n-1)))
		for i := uint32(0); i < n; i++ {
			next := i + 1
			if i == 0 || next == n {
				next = 0
			}
			putLE(&hashBuf, next)
		}
	}
	const ehSize, phSize, nph = 64, 56, 3
	off := uint64(ehSize + phSize*nph)
	dynstrOff := off
	off += uint64(dynstr.Len())
	off = (off + 7) &^ 7
	symOff := off
	off += uint64(symBuf.Len())
	hashOff := off
	off += uint64(hashBuf.Len())
	off = (off + 7) &^ 7
	relOff := off
	off += uint64(relBuf.Len())
	if off > fixtureDynVaddr {
		t.Fatalf("fixture tables end at %#x, past the dynamic section", off)
	}
	hashTag := uint64(dtHash)
	if s.gnuHash {
		hashTag = dtGNUHash
	}
	var dynBuf bytes.Buffer
	for _, d := range [][2]uint64{{dtStrtab, dynstrOff}, {dtStrsz, uint64(dynstr.Len())}, {dtSymtab, symOff}, {dtSyment, 24},
		{hashTag, hashOff}, {dtRela, relOff}, {dtRelasz, uint64(relBuf.Len())}, {dtRelaent, 24}, {0, 0}} {
		putLE(&dynBuf, d)
	}
	shstrOff := uint64(fixtureDynVaddr + dynBuf.Len())
	shOff := (shstrOff + uint64(len(shstr)) + 7) &^ 7
	progs := []elf.Prog64{
		{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R), Off: 0, Vaddr: 0, Filesz: shOff, Memsz: shOff, Align: 0x1000},
		{Type: uint32(elf.PT_DYNAMIC), Flags: uint32(elf.PF_R), Off: fixtureDynVaddr, Vaddr: fixtureDynVaddr, Filesz: uint64(dynBuf.Len()), Memsz: uint64(dynBuf.Len()), Align: 8},
		{Type: uint32(elf.PT_TLS), Flags: uint32(elf.PF_R), Vaddr: 0x3df8, Memsz: 8, Align: 8},
	}
	sects := []elf.Section64{
		{},
		{Name: 1, Type: uint32(elf.SHT_STRTAB), Flags: uint64(elf.SHF_ALLOC), Addr: dynstrOff, Off: dynstrOff, Size: uint64(dynstr.Len()), Addralign: 1},
		{Name: 9, Type: uint32(elf.SHT_DYNSYM), Flags: uint64(elf.SHF_ALLOC), Addr: symOff, Off: symOff, Size: uint64(symBuf.Len()), Link: 1, Info: 1, Addralign: 8, Entsize: 24},
		{Name: 17, Type: uint32(elf.SHT_RELA), Flags: uint64(elf.SHF_ALLOC), Addr: relOff, Off: relOff, Size: uint64(relBuf.Len()), Link: 2, Addralign: 8, Entsize: 24},
		{Name: 27, Type: uint32(elf.SHT_STRTAB), Off: shstrOff, Size: uint64(len(shstr)), Addralign: 1},
	}
	return writeELF64(elf.ET_DYN, s.machine, 0, shOff, progs, sects, func(out *bytes.Buffer) {
		out.Write(dynstr.Bytes())
		pad(out, symOff)
		out.Write(symBuf.Bytes())
		out.Write(hashBuf.Bytes())
		pad(out, relOff)
		out.Write(relBuf.Bytes())
		pad(out, fixtureDynVaddr)
		out.Write(dynBuf.Bytes())
		out.WriteString(shstr)
	})
}

func pad(out *bytes.Buffer, to uint64) {
	for uint64(out.Len()) < to {
		out.WriteByte(0)
	}
}

// writeELF64 lays out a little-endian ELF64 file: the header (e_ident
// filled in, the section name table the last section), progs right after
// it, then what body writes, zeroes up to shOff and sects there.
func writeELF64(typ elf.Type, machine elf.Machine, entry, shOff uint64, progs []elf.Prog64, sects []elf.Section64, body func(out *bytes.Buffer)) []byte {
	const ehSize, phSize = 64, 56
	hdr := elf.Header64{
		Type: uint16(typ), Machine: uint16(machine), Version: 1, Entry: entry,
		Phoff: ehSize, Shoff: shOff, Ehsize: ehSize, Phentsize: phSize, Phnum: uint16(len(progs)),
		Shentsize: 64, Shnum: uint16(len(sects)), Shstrndx: uint16(len(sects) - 1),
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var out bytes.Buffer
	putLE(&out, hdr)
	for _, p := range progs {
		putLE(&out, p)
	}
	body(&out)
	for uint64(out.Len()) < shOff {
		out.WriteByte(0)
	}
	for _, sh := range sects {
		putLE(&out, sh)
	}
	return out.Bytes()
}

func tlsSym(value uint64, vis elf.SymVis) elf.Sym64 {
	return elf.Sym64{Info: elf.ST_INFO(elf.STB_GLOBAL, elf.STT_TLS), Other: byte(vis), Shndx: 1, Value: value, Size: 8}
}

func TestParseELFAArch64(t *testing.T) {
	relocs := func(typs ...uint32) []elf.Rela64 {
		var r []elf.Rela64
		for i, typ := range typs {
			sym := uint32(1)
			if typ == rAArch64DTPMOD64 && i == 0 {
				sym = 0 // a module-relative DTPMOD64 (Local Dynamic elsewhere in the library)
			}
			r = append(r, elf.Rela64{Off: 0x4000 + uint64(8*i), Info: elf.R_INFO(sym, typ)})
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		relocs []elf.Rela64
		want   tlsRelocs
	}{
		{"tlsdesc", relocs(rAArch64TLSDESC), tlsRelocs{tlsdesc: true}},
		{"gd", relocs(rAArch64DTPMOD64, rAArch64DTPMOD64, rAArch64DTPREL64), tlsRelocs{dtpmod: true, dtpoff: true, dtpmodLocal: true}},
		{"ie", relocs(rAArch64TPREL64), tlsRelocs{tpoff: true}},
		{"x86-64 numbers mean nothing here", relocs(rX8664TLSDESC, rX8664TPOFF64), tlsRelocs{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := buildELF(t, elfSpec{machine: elf.EM_AARCH64,
				syms:   []elf.Sym64{tlsSym(0x10, elf.STV_DEFAULT), {Info: elf.ST_INFO(elf.STB_GLOBAL, elf.STT_OBJECT), Shndx: 1, Value: 0x200}},
				names:  []string{SymbolName, "_dl_debug_addr"},
				relocs: tc.relocs})
			ef, err := parseBytes(b)
			if err != nil {
				t.Fatal(err)
			}
			if ef.arch != ARM64 || !ef.sym.found || ef.sym.typ != elf.STT_TLS || ef.sym.value != 0x10 || symProblem(ef.sym) != "" {
				t.Fatalf("facts %+v", ef)
			}
			if !defined(ef.dlDebugAddr) || ef.dlDebugAddr.value != 0x200 || ef.tls == nil || ef.tls.memsz != 8 || ef.dynVaddr != 0x3e00 {
				t.Fatalf("anchors %+v", ef)
			}
			if ef.relocs != tc.want {
				t.Fatalf("relocs %+v, want %+v", ef.relocs, tc.want)
			}
		})
	}
	b := buildELF(t, elfSpec{machine: elf.EM_AARCH64, syms: []elf.Sym64{tlsSym(0, elf.STV_HIDDEN)}, names: []string{SymbolName}})
	ef, err := parseBytes(b)
	if err != nil || !strings.Contains(symProblem(ef.sym), "STV_HIDDEN") {
		t.Fatalf("hidden: %v %+v", err, ef)
	}
	b = buildELF(t, elfSpec{machine: elf.EM_PPC64})
	if _, err := parseBytes(b); !errors.Is(err, errNotELF) {
		t.Fatalf("ppc64: %v", err)
	}
}

func TestClassifyModel(t *testing.T) {
	mk := func(r tlsRelocs) *module { return &module{facts: &elfFacts{relocs: r}} }
	exe, lib, other := mk(tlsRelocs{}), mk(tlsRelocs{dtpmodLocal: true}), mk(tlsRelocs{})
	for _, tc := range []struct {
		name  string
		mods  []*module
		def   *module
		model Model
	}{
		{"le", []*module{exe, lib}, exe, ModelLocalExec},
		{"ld", []*module{exe, lib}, lib, ModelLocalDynamic},
		{"ie-elsewhere", []*module{exe, lib, mk(tlsRelocs{tpoff: true})}, lib, ModelInitialExec},
		{"gd", []*module{exe, mk(tlsRelocs{dtpmod: true, dtpoff: true})}, exe, ModelGeneralDynamic},
		{"tlsdesc-wins", []*module{mk(tlsRelocs{dtpmod: true}), mk(tlsRelocs{tlsdesc: true})}, other, ModelTLSDESC},
		{"unknown", []*module{exe, other}, other, ModelUnknown},
	} {
		if got := classifyModel(tc.mods, tc.def, exe); got != tc.model {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.model)
		}
	}
}

func TestParseMaps(t *testing.T) {
	const maps = `55d0c0a00000-55d0c0a01000 r--p 00000000 fe:01 1234 /usr/bin/pub
55d0c0a01000-55d0c0a02000 r-xp 00001000 fe:01 1234 /usr/bin/pub
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0          [heap]
7f0000000000-7f0000001000 r--p 00000000 fe:01 99 /lib/lib x.so (deleted)
7f0000001000-7f0000002000 r-xp 00001000 fe:01 99 /lib/lib x.so (deleted)
7f0000010000-7f0000011000 r--p 00004000 fe:01 77 /data/blob
7f0000020000-7f0000030000 rw-s 00000000 00:01 5 /memfd:OTEL_CTX (deleted)
7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0 [vdso]
`
	mods, err := readModules(strings.NewReader(maps), 0x55d0c0a01100, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range mods {
		got = append(got, fmt.Sprintf("%s@%x/%d", m.path, m.first.start, m.nmaps))
	}
	if !mods[0].holdsEntry || mods[1].holdsEntry {
		t.Errorf("AT_ENTRY is in the executable's second mapping: %+v %+v", mods[0], mods[1])
	}
	want := "/usr/bin/pub@55d0c0a00000/2 /lib/lib x.so (deleted)@7f0000000000/2 /memfd:OTEL_CTX (deleted)@7f0000020000/1"
	if strings.Join(got, " ") != want {
		t.Fatalf("modules %q, want %q", strings.Join(got, " "), want)
	}
}

func TestSymProblem(t *testing.T) {
	ok := symInfo{found: true, typ: elf.STT_TLS, bind: elf.STB_GLOBAL, vis: elf.STV_DEFAULT, shndx: 20}
	for _, tc := range []struct {
		mutate func(*symInfo)
		want   string
	}{
		{func(*symInfo) {}, ""},
		{func(s *symInfo) { s.bind = elf.STB_WEAK }, ""},
		{func(s *symInfo) { s.shndx = elf.SHN_UNDEF }, "undefined"},
		{func(s *symInfo) { s.typ = elf.STT_OBJECT }, "not STT_TLS"},
		{func(s *symInfo) { s.bind = elf.STB_LOCAL }, "not GLOBAL or WEAK"},
		{func(s *symInfo) { s.vis = elf.STV_INTERNAL }, "not default"},
	} {
		s := ok
		tc.mutate(&s)
		if got := symProblem(s); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: %q, want %q", s, got, tc.want)
		}
	}
	// Only an undefined reference: ErrUnsupported naming the reason; none: ErrNotFound.
	undef := &module{path: "/exe", facts: &elfFacts{sym: symInfo{found: true, typ: elf.STT_TLS, bind: elf.STB_GLOBAL}}}
	if _, err := pickDefinition([]*module{undef}, undef); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "undefined") {
		t.Errorf("undefined only: %v", err)
	}
	if _, err := pickDefinition([]*module{{facts: &elfFacts{}}}, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("none: %v", err)
	}
	lib := &module{path: "/lib", facts: &elfFacts{sym: ok}}
	exe := &module{path: "/exe", facts: &elfFacts{sym: ok}}
	if m, err := pickDefinition([]*module{lib, undef, exe}, exe); err != nil || m != exe {
		t.Errorf("executable's definition first: %v %v", m, err)
	}
	if m, err := pickDefinition([]*module{undef, lib}, undef); err != nil || m != lib {
		t.Errorf("library over undefined reference: %v %v", m, err)
	}
}

// putLE appends v, a fixed-size value, little-endian (binary.Write fails
// only on a value of no fixed size: a bug in the test).
func putLE(b *bytes.Buffer, v any) {
	if err := binary.Write(b, binary.LittleEndian, v); err != nil {
		panic(err)
	}
}

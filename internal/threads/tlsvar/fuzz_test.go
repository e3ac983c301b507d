// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"debug/elf"
	"runtime"
	"strings"
	"testing"
)

// FuzzParseELF: whatever a target maps, parsing returns facts or an error.
func FuzzParseELF(f *testing.F) {
	f.Add(buildELF(f, elfSpec{machine: elf.EM_AARCH64, syms: []elf.Sym64{tlsSym(0x10, elf.STV_DEFAULT)}, names: []string{SymbolName},
		relocs: []elf.Rela64{{Info: elf.R_INFO(1, rAArch64TLSDESC)}, {Info: elf.R_INFO(0, rAArch64DTPMOD64)}}}))
	f.Add(buildELF(f, elfSpec{machine: elf.EM_X86_64, syms: []elf.Sym64{tlsSym(0, elf.STV_DEFAULT)}, names: []string{SymbolName},
		relocs: []elf.Rela64{{Info: elf.R_INFO(1, rX8664DTPMOD64)}}}))
	f.Add([]byte(elf.ELFMAG))
	f.Add(buildELF(f, elfSpec{machine: elf.EM_X86_64, gnuHash: true, syms: []elf.Sym64{tlsSym(0x8, elf.STV_DEFAULT)}, names: []string{SymbolName},
		relocs: []elf.Rela64{{Info: elf.R_INFO(1, rX8664TLSDESC)}}}))
	f.Add(hostileELF(hostileSpec{machine: elf.EM_X86_64, nameLen: 64, nSyms: 6, nSects: 4, withVar: true, relaSize: 48}))
	f.Add(hostileELF(hostileSpec{machine: elf.EM_AARCH64, gnuHash: true, nameLen: 40, nSyms: 5, cyclic: true, relaSize: 24}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ef, err := parseBytes(b)
		runtime.ReadMemStats(&after)
		if err == nil && ef == nil {
			t.Fatal("nil facts without error")
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > parseBound {
			t.Fatalf("parsing %d bytes allocated %d", len(b), grew)
		}
	})
}

// FuzzParseMaps: any maps text parses or errors; modules start at offset 0.
func FuzzParseMaps(f *testing.F) {
	f.Add("55d0c0a00000-55d0c0a01000 r--p 00000000 fe:01 1234 /usr/bin/pub\n7f0000000000-7f0000001000 r-xp 00001000 fe:01 1234 /usr/bin/pub\n")
	f.Add("0-1 r 0 0 1 /x (deleted)\n")
	f.Fuzz(func(t *testing.T, s string) {
		mods, err := readModules(strings.NewReader(s), 0, nil)
		if err != nil {
			return
		}
		for _, m := range mods {
			if m.first.offset != 0 || m.nmaps == 0 {
				t.Fatalf("module %+v", m)
			}
		}
	})
}

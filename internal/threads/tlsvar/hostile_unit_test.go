// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// parseBound is what parsing one file may allocate: the reader's buffers,
// the facts, an error message. debug/elf allocated nSyms × nameLen here.
const parseBound = readerCost + factsCost + 8<<10

// measureParse parses b once and returns the facts, the bytes and objects
// allocated, and the error.
func measureParse(b []byte) (*elfFacts, uint64, uint64, error) {
	var before, after runtime.MemStats
	r := bytes.NewReader(b)
	runtime.GC()
	runtime.ReadMemStats(&before)
	ef, err := parseELF(r, uint64(len(b)), nil)
	runtime.ReadMemStats(&after)
	return ef, after.TotalAlloc - before.TotalAlloc, after.Mallocs - before.Mallocs, err
}

// TestHostileELF: files crafted against the reader cost its fixed buffers,
// whatever they claim, and end in facts or a clear error.
func TestHostileELF(t *testing.T) {
	for _, m := range []elf.Machine{elf.EM_X86_64, elf.EM_AARCH64} {
		for _, gnu := range []bool{false, true} {
			for _, tc := range []struct {
				name string
				spec hostileSpec
				err  string // "" : parsed, the variable found
			}{
				// 20,000 symbols and 20,000 sections named by one 64 KiB
				// string: debug/elf allocated 2.5 GiB for them.
				{"long shared names", hostileSpec{nameLen: 64 << 10, nSyms: 10000, nSects: 20000, withVar: true, relaSize: 24 * 100}, ""},
				// DT_HASH: 1 → 2 → 1; DT_GNU_HASH: no end bit.
				{"endless chain", hostileSpec{nameLen: 100, nSyms: maxChain + 10, cyclic: true, withVar: true}, "chain"},
				{"huge relocation table", hostileSpec{nameLen: 10, nSyms: 2, withVar: true, relaSize: 1 << 40}, "not in the file"},
			} {
				tc.spec.machine, tc.spec.gnuHash = m, gnu
				t.Run(fmt.Sprintf("%v/gnu=%v/%s", m, gnu, tc.name), func(t *testing.T) {
					b := hostileELF(tc.spec)
					ef, grew, objs, err := measureParse(b)
					t.Logf("%d-byte file: %d bytes, %d objects allocated; %v", len(b), grew, objs, err)
					if grew > parseBound {
						t.Errorf("allocated %d bytes, bound %d", grew, parseBound)
					}
					if tc.err == "" {
						if err != nil || !defined(ef.sym) || ef.sym.value != 0x10 || ef.symName != SymbolName {
							t.Fatalf("%+v, %v", ef, err)
						}
						return
					}
					if !errors.Is(err, errMalformed) || !strings.Contains(err.Error(), tc.err) {
						t.Fatalf("got %v, want a malformed file error mentioning %q", err, tc.err)
					}
				})
			}
		}
	}
}

// TestHostileELFAllocs: the number of allocations does not grow with the
// names (a regression copying each would allocate nSyms + nSects objects).
func TestHostileELFAllocs(t *testing.T) {
	b := hostileELF(hostileSpec{machine: elf.EM_X86_64, gnuHash: true, nameLen: 4096, nSyms: 5000, nSects: 5000, withVar: true, relaSize: 24 * 5000})
	allocs := testing.AllocsPerRun(5, func() {
		if _, err := parseBytes(b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 16 {
		t.Fatalf("%v allocations per parse", allocs)
	}
}

// TestHostileELFBroken: truncated at every length, offsets past the end,
// counts beyond the file: an error or facts, never more than the bound.
func TestHostileELFBroken(t *testing.T) {
	b := hostileELF(hostileSpec{machine: elf.EM_AARCH64, nameLen: 300, nSyms: 8, nSects: 8, withVar: true, relaSize: 24 * 8})
	for n := 0; n < len(b); n += 7 {
		if _, grew, _, _ := measureParse(b[:n]); grew > parseBound {
			t.Fatalf("truncated at %d: allocated %d", n, grew)
		}
	}
	le := binary.LittleEndian
	for _, tc := range []struct {
		name  string
		patch func(c []byte)
		err   string
	}{
		{"program headers past the end", func(c []byte) { le.PutUint64(c[32:], 1<<40) }, "past the end"},
		{"65535 program headers", func(c []byte) { le.PutUint16(c[56:], 0xffff) }, "program headers"},
		{"symbol table past the end", func(c []byte) { patchDynIn(t, c, dtSymtab, 1<<40) }, "not in the file"},
		{"string table past the end", func(c []byte) { patchDynIn(t, c, dtStrtab, 1<<40); patchDynIn(t, c, dtStrsz, 0) }, ""},
		{"dynamic section past the end", func(c []byte) { le.PutUint64(c[ehdrSize+phdrSize+8:], 1<<40) }, "past the end"},
		{"section headers past the end", func(c []byte) { le.PutUint64(c[40:], 1<<40) }, "found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := bytes.Clone(b)
			tc.patch(c)
			ef, grew, _, err := measureParse(c)
			if grew > parseBound {
				t.Errorf("allocated %d", grew)
			}
			switch tc.err {
			case "":
				if err != nil || defined(ef.sym) {
					t.Fatalf("want facts without the variable: %+v, %v", ef, err)
				}
				return
			case "found":
				if err != nil || !defined(ef.sym) || ef.symtab != nil {
					t.Fatalf("want the variable, no .symtab: %+v, %v", ef, err)
				}
				return
			}
			if !errors.Is(err, errNotELF) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.err)
			}
		})
	}
}

// patchDynIn sets tag's value in hostileELF's dynamic section (found from
// its PT_DYNAMIC, the second program header).
func patchDynIn(t *testing.T, b []byte, tag, val uint64) {
	t.Helper()
	le := binary.LittleEndian
	off := int(le.Uint64(b[ehdrSize+phdrSize+8:]))
	for ; off+16 <= len(b); off += 16 {
		switch le.Uint64(b[off:]) {
		case tag:
			le.PutUint64(b[off+8:], val)
			return
		case 0:
			t.Fatalf("no tag %#x", tag)
		}
	}
}

// TestMemBudget: the per-resolution and total ceilings refuse, an
// abandoned resolution takes nothing more, and release returns it all.
func TestMemBudget(t *testing.T) {
	base := memoryInFlight()
	a := newMemBudget(context.Background())
	if err := a.take(MaxResolutionMemory + 1); !errors.Is(err, ErrLimit) || errors.Is(err, ErrTransient) {
		t.Fatalf("over one resolution's ceiling: %v", err)
	}
	var held []*memBudget
	for i := 0; i < MaxTotalMemory/MaxResolutionMemory; i++ {
		b := newMemBudget(context.Background())
		if err := b.take(MaxResolutionMemory); err != nil {
			t.Fatalf("resolution %d: %v", i, err)
		}
		held = append(held, b)
	}
	if err := a.take(1 << 10); !errors.Is(err, ErrLimit) || !errors.Is(err, ErrTransient) {
		t.Fatalf("over the total: %v, want ErrLimit and ErrTransient (others hold it)", err)
	}
	for _, b := range held {
		b.release()
	}
	if err := a.take(1 << 10); err != nil {
		t.Fatalf("after release: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := newMemBudget(ctx)
	cancel()
	if err := c.take(1); !errors.Is(err, ErrTransient) || !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned: %v", err)
	}
	a.release()
	if got := memoryInFlight(); got != base {
		t.Fatalf("in flight %d after release, was %d", got, base)
	}
}

// TestModuleCap: a process mapping more files than maxModules is refused
// before they are opened.
func TestModuleCap(t *testing.T) {
	var maps strings.Builder
	for i := 0; i <= maxModules; i++ {
		fmt.Fprintf(&maps, "%x-%x r--p 00000000 fe:01 %d /data/f%d\n", 0x10000+i*0x1000, 0x11000+i*0x1000, i+1, i)
	}
	if _, err := readModules(strings.NewReader(maps.String()), 0, newMemBudget(context.Background())); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "files mapped") {
		t.Fatalf("%v", err)
	}
	// Long paths hit the memory ceiling first.
	maps.Reset()
	long := strings.Repeat("p", 4000)
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&maps, "%x-%x r--p 00000000 fe:01 %d /%s%d\n", 0x10000+i*0x1000, 0x11000+i*0x1000, i+1, long, i)
	}
	mem := newMemBudget(context.Background())
	defer mem.release()
	if _, err := readModules(strings.NewReader(maps.String()), 0, mem); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "one resolution") {
		t.Fatalf("%v", err)
	}
}

// BenchmarkHostileELF: what parsing the long-names file costs, with
// debug/elf as the resolver used it before (NewFile, DynamicSymbols: names
// × length bytes) and with the reader (its buffers).
func BenchmarkHostileELF(b *testing.B) {
	file := hostileELF(hostileSpec{machine: elf.EM_X86_64, gnuHash: true, nameLen: 4 << 10, nSyms: 10000, nSects: 20000, withVar: true, relaSize: 24 * 100})
	b.Run("debug-elf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f, err := elf.NewFile(bytes.NewReader(file))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.DynamicSymbols(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reader", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parseBytes(file); err != nil {
				b.Fatal(err)
			}
		}
	})
}

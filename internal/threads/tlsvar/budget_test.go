// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// A file whose dynamic section claims a huge relocation table inside a
// huge PT_LOAD (sparse on disk: it costs a hostile publisher nothing) is
// refused by the read budget, having allocated only the reader's buffers.
func TestELFReadBudget(t *testing.T) {
	src := buildELF(t, elfSpec{machine: elf.EM_X86_64, syms: []elf.Sym64{tlsSym(0, elf.STV_DEFAULT)}, names: []string{SymbolName},
		relocs: []elf.Rela64{{Info: elf.R_INFO(1, rX8664TLSDESC)}}})
	const huge = 1536 << 20
	// PT_LOAD (the first program header) covers 2 GiB of file.
	binary.LittleEndian.PutUint64(src[64+32:], 2<<30)
	binary.LittleEndian.PutUint64(src[64+40:], 2<<30)
	patchDyn(t, src, dtRelasz, huge)

	path := filepath.Join(t.TempDir(), "huge.so")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 2<<30); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = parseELF(&budgetReaderAt{r: fh, left: maxELFRead}, 2<<30, nil)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errELFBudget) || !errors.Is(err, ErrLimit) {
		t.Fatalf("got %v, want the read budget error", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 2*readerCost {
		t.Fatalf("parsing allocated %d KiB, the reader's buffers are %d KiB", grew>>10, readerCost>>10)
	}
}

// patchDyn sets the value of tag in buildELF's dynamic section.
func patchDyn(t testing.TB, b []byte, tag, val uint64) {
	t.Helper()
	for off := fixtureDynVaddr; off+16 <= len(b); off += 16 {
		switch binary.LittleEndian.Uint64(b[off:]) {
		case tag:
			binary.LittleEndian.PutUint64(b[off+8:], val)
			return
		case 0:
			t.Fatalf("no dynamic tag %#x", tag)
		}
	}
	t.Fatalf("no dynamic tag %#x", tag)
}

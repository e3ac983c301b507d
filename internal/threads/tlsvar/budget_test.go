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

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// A file whose section headers claim a huge .dynsym (sparse on disk: it
// costs a hostile publisher nothing) is refused by the read budget instead
// of making the reader allocate gigabytes.
func TestELFReadBudget(t *testing.T) {
	src, err := os.ReadFile("/bin/true")
	if err != nil {
		testenv.Missing(t, "no /bin/true to craft the ELF file from")
	}
	f, err := elf.NewFile(bytesReaderAt(src))
	if err != nil {
		t.Fatal(err)
	}
	ds := f.Section(".dynsym")
	if ds == nil || f.Class != elf.ELFCLASS64 {
		testenv.Missing(t, "/bin/true has no 64-bit .dynsym to craft from")
	}
	idx := -1
	for i, s := range f.Sections {
		if s == ds {
			idx = i
		}
	}
	shoff := binary.LittleEndian.Uint64(src[0x28:])
	shentsize := binary.LittleEndian.Uint16(src[0x3a:])
	hdr := src[shoff+uint64(idx)*uint64(shentsize):]
	const huge = 1536 << 20
	binary.LittleEndian.PutUint64(hdr[24:], 1<<30) // sh_offset: 1 GiB in, a hole
	binary.LittleEndian.PutUint64(hdr[32:], huge)  // sh_size: 1.5 GiB

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
	_, err = parseELF(&budgetReaderAt{r: fh, left: maxELFRead})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errELFBudget) {
		t.Fatalf("got %v, want the read budget error", err)
	}
	// debug/elf grows its buffer by doubling while it reads, so the
	// allocation is a small multiple of the budget, never the claimed size.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4*maxELFRead {
		t.Fatalf("parsing allocated %d MiB, budget is %d MiB", grew>>20, maxELFRead>>20)
	}
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, os.ErrInvalid
	}
	return copy(p, b[off:]), nil
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"reflect"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// cancelAfter cancels its resolution's context once n reads have been served.
type cancelAfter struct {
	r      io.ReaderAt
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) ReadAt(p []byte, off int64) (int, error) {
	if c.n--; c.n == 0 {
		c.cancel()
	}
	return c.r.ReadAt(p, off)
}

// The Resolver keeps any answer but ErrTransient as the file's, for every
// process mapping it: a resolution abandoned at any read must end in
// ErrTransient or in the very facts an uninterrupted parse gives, never in
// facts missing what the interrupted read would have found (a static glibc
// taken for musl, libc's thread_db descriptors, the .symtab).
func TestParseAbandonedAtEveryRead(t *testing.T) {
	files := map[string][]byte{
		"static glibc exe": staticExeWithABINote([]symtabEntry{{name: SymbolName, typ: elf.STT_TLS, bind: elf.STB_GLOBAL, shndx: 1}}),
	}
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"} {
		if b, err := os.ReadFile(p); err == nil {
			files[p] = b
		}
	}
	if len(files) < 2 {
		testenv.Missing(t, "the system's glibc libc.so.6")
	}
	for name, b := range files {
		t.Run(name, func(t *testing.T) {
			want, wantErr := parseBytes(b)
			if wantErr != nil {
				t.Fatal(wantErr)
			}
			for k := 1; ; k++ {
				ctx, cancel := context.WithCancel(context.Background())
				mem := newMemBudget(ctx)
				src := &budgetReaderAt{r: &cancelAfter{r: bytes.NewReader(b), n: k, cancel: cancel}, left: maxELFRead, mem: mem}
				br, err := newBlockReader(src, uint64(len(b)), mem)
				if err != nil {
					t.Fatal(err)
				}
				got, err := parseGuarded(br, uint64(len(b)), mem)
				mem.release()
				done := ctx.Err() == nil
				cancel()
				switch {
				case err != nil && !errors.Is(err, ErrTransient):
					t.Fatalf("abandoned after %d reads: %v, not ErrTransient (it would be kept as the file's answer)", k, err)
				case err == nil && !reflect.DeepEqual(got, want):
					t.Fatalf("abandoned after %d reads: facts\n%+v\nwant\n%+v", k, got, want)
				}
				if done {
					t.Logf("%d reads; every interruption ends in ErrTransient or the same facts", k)
					return
				}
			}
		})
	}
}

// staticExeWithABINote is buildStaticExe's file with glibc's .note.ABI-tag
// (a PT_NOTE): a static glibc executable, as its reader tells it from musl's.
func staticExeWithABINote(entries []symtabEntry) []byte {
	const ehSize, phSize, nph = 64, 56, 3
	tab, ref := craftSymtab(ehSize+phSize*nph, entries)
	note := make([]byte, 32)
	binary.LittleEndian.PutUint32(note[0:], 4)  // namesz
	binary.LittleEndian.PutUint32(note[4:], 16) // descsz
	binary.LittleEndian.PutUint32(note[8:], 1)  // NT_GNU_ABI_TAG
	copy(note[12:], "GNU\x00")
	// The note and the section headers each in a block of their own: each
	// is the reader's last read of the file at some point.
	const noteOff, shOff = blockSize, 2 * blockSize
	shstr := "\x00.symtab\x00.strtab\x00.shstrtab\x00"
	shstrOff := noteOff + uint64(len(note))
	progs := []elf.Prog64{
		{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X), Vaddr: 0x400000, Paddr: 0x400000, Filesz: shOff, Memsz: shOff, Align: 0x1000},
		{Type: uint32(elf.PT_TLS), Flags: uint32(elf.PF_R), Vaddr: 0x401000, Memsz: 16, Align: 8},
		{Type: uint32(elf.PT_NOTE), Flags: uint32(elf.PF_R), Off: noteOff, Vaddr: 0x400000 + noteOff, Filesz: uint64(len(note)), Memsz: uint64(len(note)), Align: 4},
	}
	sects := []elf.Section64{
		{},
		{Name: 1, Type: uint32(elf.SHT_SYMTAB), Off: ref.off, Size: ref.size, Link: 2, Info: 1, Addralign: 8, Entsize: 24},
		{Name: 9, Type: uint32(elf.SHT_STRTAB), Off: ref.strOff, Size: ref.strSz, Addralign: 1},
		{Name: 17, Type: uint32(elf.SHT_STRTAB), Off: shstrOff, Size: uint64(len(shstr)), Addralign: 1},
	}
	return writeELF64(elf.ET_EXEC, elf.EM_X86_64, 0x400000, shOff, progs, sects, func(out *bytes.Buffer) {
		out.Write(tab[out.Len():])
		for uint64(out.Len()) < noteOff {
			out.WriteByte(0)
		}
		out.Write(note)
		out.WriteString(shstr)
	})
}

func TestStaticExeWithABINote(t *testing.T) {
	ef, err := parseBytes(staticExeWithABINote([]symtabEntry{{name: SymbolName, typ: elf.STT_TLS, bind: elf.STB_GLOBAL, shndx: 1}}))
	if err != nil || !ef.glibcMarker || ef.symtab == nil || ef.hasInterp {
		t.Fatalf("got %+v, %v; want a static glibc executable with a .symtab", ef, err)
	}
}

// A .symtab or .strtab the section headers place past the file's end (or
// past int64) is a malformed file's: parsed as stripped, so the answer is
// kept, not an offset whose read fails as ErrTransient at every resolution.
func TestSymtabPastTheFile(t *testing.T) {
	entries := []symtabEntry{{name: SymbolName, typ: elf.STT_TLS, bind: elf.STB_GLOBAL, shndx: 1}}
	good := staticExeWithABINote(entries)
	shoff := binary.LittleEndian.Uint64(good[40:])
	for _, tc := range []struct {
		name  string
		field int    // in section header 1 (.symtab) or 2 (.strtab)
		sect  uint64 // section index
		val   uint64
	}{
		{".symtab offset past int64", 24, 1, 1 << 63},
		{".symtab offset past the end", 24, 1, uint64(len(good))},
		{".symtab size past the end", 32, 1, 1 << 40},
		{".symtab offset+size wraps", 32, 1, ^uint64(0) - 100},
		{".strtab offset past int64", 24, 2, ^uint64(0) - 8},
		{".strtab size past the end", 32, 2, uint64(len(good))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(good)
			binary.LittleEndian.PutUint64(b[shoff+tc.sect*shdrSize+uint64(tc.field):], tc.val)
			ef, err := parseBytes(b)
			if err != nil || ef.symtab != nil {
				t.Fatalf("got %+v, %v; want facts without .symtab", ef, err)
			}
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// symtabEntry is one crafted .symtab entry.
type symtabEntry struct {
	name  string
	typ   elf.SymType
	bind  elf.SymBind
	vis   elf.SymVis
	shndx elf.SectionIndex
	value uint64
}

// craftSymtab lays out a .symtab (null entry first) and its .strtab in one
// buffer, optionally after pad bytes, and returns it with the ref.
func craftSymtab(pad int, entries []symtabEntry) ([]byte, *symtabRef) {
	str := []byte{0}
	tab := make([]byte, 24) // entry 0
	for _, e := range entries {
		var b [24]byte
		binary.LittleEndian.PutUint32(b[0:], uint32(len(str)))
		str = append(append(str, e.name...), 0)
		b[4] = byte(e.bind)<<4 | byte(e.typ)
		b[5] = byte(e.vis)
		binary.LittleEndian.PutUint16(b[6:], uint16(e.shndx))
		binary.LittleEndian.PutUint64(b[8:], e.value)
		binary.LittleEndian.PutUint64(b[16:], 8)
		tab = append(tab, b[:]...)
	}
	buf := append(make([]byte, pad), tab...)
	ref := &symtabRef{off: uint64(pad), size: uint64(len(tab)), strOff: uint64(len(buf)), strSz: uint64(len(str))}
	return append(buf, str...), ref
}

func TestFindSymtab(t *testing.T) {
	tls := func(name string, bind elf.SymBind, vis elf.SymVis, value uint64) symtabEntry {
		return symtabEntry{name: name, typ: elf.STT_TLS, bind: bind, vis: vis, shndx: 7, value: value}
	}
	// Enough unrelated symbols that the table spans several read chunks.
	var filler []symtabEntry
	for i := 0; i < 2*symtabChunk/24+5; i++ {
		filler = append(filler, symtabEntry{name: "f", typ: elf.STT_FUNC, bind: elf.STB_GLOBAL, shndx: 1})
	}
	for _, tc := range []struct {
		name    string
		entries []symtabEntry
		value   uint64
		err     error
		why     string
	}{
		{"global", []symtabEntry{tls(SymbolName, elf.STB_GLOBAL, elf.STV_DEFAULT, 0x20)}, 0x20, nil, ""},
		{"weak hidden", []symtabEntry{tls(SymbolName, elf.STB_WEAK, elf.STV_HIDDEN, 0x28)}, 0x28, nil, ""},
		{"single local", []symtabEntry{tls(SymbolName, elf.STB_LOCAL, elf.STV_DEFAULT, 0x10)}, 0x10, nil, ""},
		{"global beats locals", []symtabEntry{
			tls(SymbolName, elf.STB_LOCAL, elf.STV_DEFAULT, 0x10), tls(SymbolName, elf.STB_LOCAL, elf.STV_DEFAULT, 0x18),
			tls(SymbolName, elf.STB_GLOBAL, elf.STV_DEFAULT, 0x30)}, 0x30, nil, ""},
		{"two locals", []symtabEntry{
			tls(SymbolName, elf.STB_LOCAL, elf.STV_DEFAULT, 0x10), tls(SymbolName, elf.STB_LOCAL, elf.STV_DEFAULT, 0x18)},
			0, ErrUnsupported, "ambiguous"},
		{"after chunks", append(append([]symtabEntry{}, filler...), tls(SymbolName, elf.STB_GLOBAL, elf.STV_DEFAULT, 0x40)), 0x40, nil, ""},
		{"not TLS", []symtabEntry{{name: SymbolName, typ: elf.STT_OBJECT, bind: elf.STB_GLOBAL, shndx: 7}}, 0, ErrNotFound, ""},
		{"undefined", []symtabEntry{{name: SymbolName, typ: elf.STT_TLS, bind: elf.STB_GLOBAL, shndx: elf.SHN_UNDEF}}, 0, ErrNotFound, ""},
		{"absolute", []symtabEntry{{name: SymbolName, typ: elf.STT_TLS, bind: elf.STB_GLOBAL, shndx: elf.SHN_ABS}}, 0, ErrNotFound, ""},
		{"prefix only", []symtabEntry{tls(SymbolName+"_old", elf.STB_GLOBAL, elf.STV_DEFAULT, 8), tls("otel_thread_ctx", elf.STB_GLOBAL, elf.STV_DEFAULT, 8)}, 0, ErrNotFound, ""},
		{"empty", nil, 0, ErrNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, ref := craftSymtab(100, tc.entries)
			s, err := findSymtab(bytes.NewReader(b), ref, nil)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.why) {
					t.Fatalf("got %+v, %v; want %v mentioning %q", s, err, tc.err, tc.why)
				}
				return
			}
			if err != nil || s.value != tc.value || s.typ != elf.STT_TLS || !s.found {
				t.Fatalf("got %+v, %v; want value %#x", s, err, tc.value)
			}
		})
	}
}

// The .symtab read shares the file's budget: a table claiming more than
// what parsing left is refused, not read.
func TestFindSymtabBudget(t *testing.T) {
	b, ref := craftSymtab(0, []symtabEntry{{name: SymbolName, typ: elf.STT_TLS, bind: elf.STB_GLOBAL, shndx: 7}})
	if _, err := findSymtab(&budgetReaderAt{r: bytes.NewReader(b), left: int64(ref.size) - 1}, ref, nil); !errors.Is(err, errELFBudget) {
		t.Fatalf("got %v, want the budget error", err)
	}
	size := ref.size
	ref.size = 1 << 40 // a hostile header
	if _, err := findSymtab(&budgetReaderAt{r: bytes.NewReader(b), left: maxELFRead}, ref, nil); err == nil {
		t.Fatal("a table past the end of the file was accepted")
	}
	// A string table beyond the file: an error, not a match or a panic.
	if s, err := findSymtab(bytes.NewReader(b), &symtabRef{size: size, strOff: 1 << 40, strSz: 1 << 41}, nil); err == nil || !strings.Contains(err.Error(), ".strtab") || s.found {
		t.Fatalf("string table out of the file: %+v, %v", s, err)
	}
}

// parseELF records where .symtab is, and nothing when there is none; the
// lookup reads the table through that reference and agrees with debug/elf.
func TestParseELFSymtabRef(t *testing.T) {
	ef, err := parseBytes(buildELF(t, elfSpec{machine: elf.EM_X86_64}))
	if err != nil || ef.symtab != nil {
		t.Fatalf("fixture without .symtab: %+v, %v", ef, err)
	}
	gcc := testenv.RequireTool(t, "gcc")
	dir := t.TempDir()
	src, exe := filepath.Join(dir, "v.c"), filepath.Join(dir, "v")
	code := "__thread void *other[3];\n__thread void *otel_thread_ctx_v1;\nint main(void) { return other[0] == otel_thread_ctx_v1; }\n"
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ef, err = parseFile(t, f); err != nil || ef.symtab == nil || ef.sym.found {
		t.Fatalf("not exported, in .symtab: %+v, %v", ef, err)
	}
	got, err := findSymtab(f, ef.symtab, nil)
	if err != nil {
		t.Fatal(err)
	}
	ff, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer ff.Close()
	syms, _ := ff.Symbols()
	for _, s := range syms {
		if s.Name == SymbolName && (s.Value != got.value || elf.ST_BIND(s.Info) != got.bind) {
			t.Fatalf("found %+v, debug/elf says %+v", got, s)
		}
	}
}

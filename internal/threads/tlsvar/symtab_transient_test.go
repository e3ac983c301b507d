// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// buildStaticExe writes a minimal x86-64 ET_EXEC with no PT_INTERP and no
// .dynsym (a plain -static executable): one PT_LOAD at 0x400000, a PT_TLS of
// 16 bytes, and a .symtab/.strtab holding entries.
func buildStaticExe(t *testing.T, entries []symtabEntry) []byte {
	t.Helper()
	const ehSize, phSize, nph = 64, 56, 2
	tab, ref := craftSymtab(ehSize+phSize*nph, entries)
	shstr := "\x00.symtab\x00.strtab\x00.shstrtab\x00"
	shstrOff := uint64(len(tab))
	shOff := (shstrOff + uint64(len(shstr)) + 7) &^ 7
	progs := []elf.Prog64{
		{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X), Vaddr: 0x400000, Paddr: 0x400000, Filesz: shOff, Memsz: shOff, Align: 0x1000},
		{Type: uint32(elf.PT_TLS), Flags: uint32(elf.PF_R), Vaddr: 0x401000, Memsz: 16, Align: 8},
	}
	sects := []elf.Section64{
		{},
		{Name: 1, Type: uint32(elf.SHT_SYMTAB), Off: ref.off, Size: ref.size, Link: 2, Info: 1, Addralign: 8, Entsize: 24},
		{Name: 9, Type: uint32(elf.SHT_STRTAB), Off: ref.strOff, Size: ref.strSz, Addralign: 1},
		{Name: 17, Type: uint32(elf.SHT_STRTAB), Off: shstrOff, Size: uint64(len(shstr)), Addralign: 1},
	}
	return writeELF64(elf.ET_EXEC, elf.EM_X86_64, 0x400000, shOff, progs, sects, func(out *bytes.Buffer) {
		out.Write(tab[out.Len():])
		out.WriteString(shstr)
	})
}

// fakeProc lays out procRoot/PID with maps naming /exe and the executable
// under procRoot/PID/root/exe (the path statModule falls back to).
func fakeProc(t *testing.T, procRoot string, pid int, exe []byte) {
	t.Helper()
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	if err := os.MkdirAll(filepath.Join(dir, "root"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "root", "exe")
	if err := os.WriteFile(path, exe, 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	maps := "00400000-00401000 r-xp 00000000 08:01 " + strconv.FormatUint(fi.Sys().(*syscall.Stat_t).Ino, 10) + " /exe\n"
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(maps), 0o644); err != nil {
		t.Fatal(err)
	}
}

// failingReads is an opened file whose reads fail with err.
type failingReads struct {
	*os.File
	err error
}

func (f failingReads) ReadAt([]byte, int64) (int, error) { return 0, f.err }

// The .symtab answer is kept per file and shared by every process running
// it: a failure to open or read the file (the process exited mid-resolve,
// EMFILE, EIO) must not be kept as "not found". It is ErrTransient, and the
// next resolution, once the file can be read, finds the variable. Answers
// about the file (found; no such symbol) are kept: no open at all after.
func TestSymtabTransientNotCached(t *testing.T) {
	procRoot := t.TempDir()
	fakeProc(t, procRoot, 1, buildStaticExe(t, []symtabEntry{
		{name: "other", typ: elf.STT_FUNC, bind: elf.STB_GLOBAL, shndx: 1, value: 0x400100},
		{name: SymbolName, typ: elf.STT_TLS, bind: elf.STB_LOCAL, shndx: 1, value: 8},
	}))
	fakeProc(t, procRoot, 2, buildStaticExe(t, []symtabEntry{
		{name: "other", typ: elf.STT_FUNC, bind: elf.STB_GLOBAL, shndx: 1, value: 0x400100},
	}))
	r := NewResolver(procRoot)
	opens := 0
	plain := func(path string) (symtabFile, error) {
		opens++
		return os.Open(path)
	}
	failures := []struct {
		name string
		open func(string) (symtabFile, error)
		want error
	}{
		{"open EMFILE", func(path string) (symtabFile, error) {
			opens++
			return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EMFILE}
		}, syscall.EMFILE},
		{"open ENOENT (exited)", func(path string) (symtabFile, error) {
			opens++
			return nil, &os.PathError{Op: "open", Path: path, Err: syscall.ENOENT}
		}, syscall.ENOENT},
		{"read EIO", func(path string) (symtabFile, error) {
			f, err := plain(path)
			if err != nil {
				return nil, err
			}
			return failingReads{f.(*os.File), &os.PathError{Op: "read", Path: path, Err: syscall.EIO}}, nil
		}, syscall.EIO},
	}
	for _, tc := range failures {
		r.openSymtab = tc.open
		loc, err := r.Resolve(1)
		if !errors.Is(err, ErrTransient) || errors.Is(err, ErrNotFound) || !errors.Is(err, tc.want) {
			t.Fatalf("%s: %v, %v; want ErrTransient wrapping %v, not ErrNotFound", tc.name, loc, err, tc.want)
		}
	}
	// The file can be read again: found, not a remembered "not found".
	r.openSymtab = plain
	opens = 0
	loc, err := r.Resolve(1)
	if err != nil {
		t.Fatalf("after the transient failures: %v", err)
	}
	if loc.SymbolTable != SymbolTableSymtab || loc.Placement != StaticTLS || loc.TPOffset != -16+8 || opens != 1 {
		t.Fatalf("%v (table %s, tp%+d) after %d opens; want static tp-8 from .symtab, one open", loc, loc.SymbolTable, loc.TPOffset, opens)
	}
	// Definitive answers are kept: neither file is opened again.
	if _, err := r.Resolve(2); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrTransient) {
		t.Fatalf("no such symbol: %v, want ErrNotFound", err)
	}
	r.openSymtab = failures[0].open
	opens = 0
	if loc, err := r.Resolve(1); err != nil || loc.SymbolTable != SymbolTableSymtab {
		t.Fatalf("found, then cached: %v, %v", loc, err)
	}
	if _, err := r.Resolve(2); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrTransient) {
		t.Fatalf("not found, then cached: %v", err)
	}
	if opens != 0 {
		t.Fatalf("%d opens of files whose .symtab answer was kept", opens)
	}
}

// A table the file cannot hold (headers past its end) or the budget
// refuses is the file's own answer: ErrNotFound with the reason, kept.
func TestSymtabDefinitiveReadErrors(t *testing.T) {
	for _, readErr := range []error{io.EOF, io.ErrUnexpectedEOF, errELFBudget} {
		procRoot := t.TempDir()
		fakeProc(t, procRoot, 1, buildStaticExe(t, []symtabEntry{
			{name: SymbolName, typ: elf.STT_TLS, bind: elf.STB_GLOBAL, shndx: 1, value: 8},
		}))
		r := NewResolver(procRoot)
		opens := 0
		r.openSymtab = func(path string) (symtabFile, error) {
			opens++
			f, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			return failingReads{f, readErr}, nil
		}
		for range 2 {
			if _, err := r.Resolve(1); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrTransient) || !errors.Is(err, readErr) {
				t.Fatalf("%v: got %v, want ErrNotFound wrapping it", readErr, err)
			}
		}
		if opens != 1 {
			t.Fatalf("%v: %d opens, want 1 (the answer kept)", readErr, opens)
		}
	}
}

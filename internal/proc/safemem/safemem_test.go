// SPDX-License-Identifier: Apache-2.0

//go:build linux

package safemem

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"github.com/otelctx/otelctx/internal/proc/procmaps"
	"github.com/otelctx/otelctx/internal/proc/remote"
)

// touched receives a byte read from a mapping, to fault its page in.
var touched byte

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

// The test reads its own memory (process_vm_readv on oneself needs no
// privilege): an anonymous mapping and the Go heap are read; a file
// mapping (the executable's read-only data is one too) and a range that
// runs from anonymous memory into one are refused with ErrFileBacked; an
// unmapped address and a range that wraps, with remote.ErrBadAddress.
func TestReadsOnlyAnonymousMemory(t *testing.T) {
	page := os.Getpagesize()
	anon, err := syscall.Mmap(-1, 0, 2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(anon) })
	copy(anon, "anonymous")

	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, make([]byte, page), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	file, err := syscall.Mmap(int(f.Fd()), 0, page, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(file) })

	m := New("", os.Getpid())
	buf := make([]byte, 9)
	if err := m.ReadAt(buf, addrOf(anon)); err != nil || string(buf) != "anonymous" {
		t.Fatalf("anonymous mapping: %q, %v", buf, err)
	}
	// The rest of that mapping is known safe: no second maps read.
	if _, err := m.ReadUint64(addrOf(anon) + uint64(page)); err != nil || m.MapsReads != 1 {
		t.Fatalf("second read: %v, %d maps reads (want 1)", err, m.MapsReads)
	}
	heap := make([]byte, 14)
	copy(heap, "on the Go heap")
	got := make([]byte, len(heap))
	if err := m.ReadAt(got, addrOf(heap)); err != nil || string(got) != string(heap) {
		t.Fatalf("heap: %q, %v", got, err)
	}
	if err := m.ReadAt(buf, addrOf(file)); !errors.Is(err, ErrFileBacked) {
		t.Fatalf("file mapping: %v, want ErrFileBacked", err)
	}
	if _, err := m.ReadUint64(8); !errors.Is(err, remote.ErrBadAddress) {
		t.Fatalf("unmapped address: %v, want remote.ErrBadAddress", err)
	}
	if err := m.ReadAt(buf, ^uint64(3)); !errors.Is(err, remote.ErrBadAddress) {
		t.Fatalf("range that wraps: %v, want remote.ErrBadAddress", err)
	}
	// From anonymous memory into a file mapping (placed right after it).
	joined, err := syscall.Mmap(-1, 0, 2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(joined) })
	if _, _, errno := syscall.Syscall6(syscall.SYS_MMAP, uintptr(addrOf(joined))+uintptr(page), uintptr(page),
		syscall.PROT_READ, syscall.MAP_SHARED|syscall.MAP_FIXED, f.Fd(), 0); errno != 0 {
		t.Fatal(errno)
	}
	m.Reset() // a mapping made since this round's reload is the next round's
	if err := m.ReadAt(make([]byte, 16), addrOf(joined)+uint64(page)-8); !errors.Is(err, ErrFileBacked) {
		t.Fatalf("anonymous memory into a file mapping: %v, want ErrFileBacked", err)
	}
}

func TestAnonymous(t *testing.T) {
	for name, want := range map[string]bool{
		"": true, "[heap]": true, "[stack]": true, "[anon:OTEL_CTX]": true,
		"/memfd:OTEL_CTX (deleted)": true, "/SYSV00000000 (deleted)": true, "/dev/zero (deleted)": true,
		"/usr/lib/libc.so.6": false, "/mnt/fuse/payload": false, "/tmp/memfd:x": false,
	} {
		if got := Anonymous(procmaps.Mapping{Name: name}); got != want {
			t.Errorf("Anonymous(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestResidentFilePages: pages of a file mapping are read when they are in
// the process's page tables (written pages of a private mapping, touched
// page-cache pages), checked in /proc/PID/pagemap on every read.
func TestResidentFilePages(t *testing.T) {
	page := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, make([]byte, 2*page), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	private, err := syscall.Mmap(int(f.Fd()), 0, 2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(private) })
	shared, err := syscall.Mmap(int(f.Fd()), 0, page, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(shared) })

	m := New("", os.Getpid())
	if err := m.Load(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	// Untouched: refused.
	if err := m.ReadAt(buf, addrOf(private)); !errors.Is(err, ErrFileBacked) {
		t.Fatalf("untouched private page: %v, want ErrFileBacked", err)
	}
	// Written (copy-on-write: the process's own page): read.
	copy(private, "written!")
	if err := m.ReadAt(buf, addrOf(private)); err != nil || string(buf) != "written!" {
		t.Fatalf("written private page: %q, %v", buf, err)
	}
	// Its neighbour, never written: still refused.
	if err := m.ReadAt(buf, addrOf(private)+uint64(page)); !errors.Is(err, ErrFileBacked) {
		t.Fatalf("untouched page next to a written one: %v, want ErrFileBacked", err)
	}
	// A page-cache page the process touched: read.
	touched = shared[0] // a load the compiler keeps: it faults the page in
	if err := m.ReadAt(buf, addrOf(shared)); err != nil {
		t.Fatalf("touched shared page: %v", err)
	}
	// One look at the mappings; every read of file pages checked.
	if m.MapsReads != 1 || m.PagemapReads != 4 {
		t.Errorf("maps reads %d, pagemap reads %d; want 1 and 4", m.MapsReads, m.PagemapReads)
	}
}

// TestLoadEachSharesTheMapsRead: a caller that finds its mapping while
// LoadEach reads the maps reads it without a second maps read.
func TestLoadEachSharesTheMapsRead(t *testing.T) {
	page := os.Getpagesize()
	anon, err := syscall.Mmap(-1, 0, page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(anon) })
	copy(anon, "found")
	m := New("", os.Getpid())
	var found uint64
	lines := 0
	if err := m.LoadEach(func(l *procmaps.Line) {
		lines++
		if l.Start <= addrOf(anon) && addrOf(anon) < l.End {
			found = addrOf(anon)
		}
	}); err != nil || found == 0 || lines < 2 {
		t.Fatalf("LoadEach: %v, %d lines, mapping found: %v", err, lines, found != 0)
	}
	buf := make([]byte, 5)
	if err := m.ReadAt(buf, found); err != nil || string(buf) != "found" || m.MapsReads != 1 {
		t.Fatalf("read after LoadEach: %q, %v, %d maps reads (want 1)", buf, err, m.MapsReads)
	}
}

// Reads at unmapped addresses (threads pointing anywhere, read while they
// are stopped) cost at most one maps read per round, not one each; a
// mapping made since is found in the next round.
func TestMissesReloadOncePerRound(t *testing.T) {
	m := New("", os.Getpid())
	if err := m.Load(); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		if _, err := m.ReadUint64(8 + uint64(i)*8); !errors.Is(err, remote.ErrBadAddress) {
			t.Fatalf("unmapped address %d: %v, want remote.ErrBadAddress", i, err)
		}
	}
	if m.MapsReads != 2 || m.Misses != 16 {
		t.Fatalf("%d maps reads, %d misses; want 2 (the load and one reload) and 16", m.MapsReads, m.Misses)
	}
	page := os.Getpagesize()
	anon, err := syscall.Mmap(-1, 0, page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(anon) })
	copy(anon, "new mapping")
	m.Reset()
	buf := make([]byte, 11)
	if err := m.ReadAt(buf, addrOf(anon)); err != nil || string(buf) != "new mapping" || m.MapsReads != 3 {
		t.Fatalf("next round: %q, %v, %d maps reads (want 3)", buf, err, m.MapsReads)
	}
}

// ReadEach reads the ranges the checks accept and only those: two
// anonymous ranges touched (accepted by one pagemap pread, no maps read), a
// page of a file mapping never touched (refused, ErrFileBacked's case), an
// unmapped page and a wrapping range (not read); the others are read all
// the same, in one batch.
func TestReadEach(t *testing.T) {
	page := os.Getpagesize()
	anon, err := syscall.Mmap(-1, 0, 3*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(anon) })
	copy(anon, "first")
	copy(anon[2*page:], "third")
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, make([]byte, page), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	file, err := syscall.Mmap(int(f.Fd()), 0, page, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(file) })
	hole, err := syscall.Mmap(-1, 0, page, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	holeAddr := addrOf(hole)
	if err := syscall.Munmap(hole); err != nil {
		t.Fatal(err)
	}

	m := New("", os.Getpid())
	bufs := [][]byte{make([]byte, 5), make([]byte, 8), make([]byte, 5), make([]byte, 8), make([]byte, 16)}
	addrs := []uint64{addrOf(anon), addrOf(file), addrOf(anon) + 2*uint64(page), holeAddr, ^uint64(0) - 7}
	ok := make([]bool, len(bufs))
	if _, err := m.ReadEach(bufs[:1], addrs[:1], ok[:1]); err != nil || !ok[0] || string(bufs[0]) != "first" {
		t.Fatalf("one anonymous range: %q, %v, %v", bufs[0], ok[0], err)
	}
	if m.MapsReads != 0 || m.PagemapReads != 1 {
		t.Fatalf("an anonymous range in the page tables cost %d maps reads, %d pagemap reads; want 0 and 1", m.MapsReads, m.PagemapReads)
	}
	m.Reset()
	calls, err := m.ReadEach(bufs, addrs, ok)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, true, false, false}
	for i := range want {
		if ok[i] != want[i] {
			t.Errorf("range %d at %#x: ok %v, want %v", i, addrs[i], ok[i], want[i])
		}
	}
	if string(bufs[0]) != "first" || string(bufs[2]) != "third" {
		t.Errorf("read %q, %q", bufs[0], bufs[2])
	}
	if calls != 1 {
		t.Errorf("%d process_vm_readv calls, want 1 (refused ranges are not read)", calls)
	}
	t.Logf("maps reads %d, pagemap reads %d", m.MapsReads, m.PagemapReads)
}

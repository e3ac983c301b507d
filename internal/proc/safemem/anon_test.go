// SPDX-License-Identifier: Apache-2.0

//go:build linux

package safemem

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/otelctx/otelctx/internal/proc/procmaps"
)

// TestAnonymousNamesExact: only the exact names the kernel gives memory of
// the process count, not a file whose path merely starts like one (a
// container's mount namespace can have /dev/zerofs or /memfd:x/ on FUSE).
func TestAnonymousNamesExact(t *testing.T) {
	for name, want := range map[string]bool{
		"": true, "[heap]": true, "[anon:x]": true, "[anon_shmem:OTEL_CTX]": true,
		"/memfd:OTEL_CTX": true, "/memfd:OTEL_CTX (deleted)": true, "/memfd:a b c (deleted)": true, "/memfd:": true,
		"/memfd:x/payload": false, "/memfd:x/y (deleted)": false, "/memfd:/": false,
		"/SYSV0000002a": true, "/SYSV0000002a (deleted)": true, "/SYSVdeadBEEF (deleted)": true,
		"/SYSV": false, "/SYSV0000002": false, "/SYSV0000002g (deleted)": false, "/SYSV0000002a/x": false,
		"/SYSV0000002a (deleted)/x": false, "/SYSV0000002a0": false,
		"/dev/zero": true, "/dev/zero (deleted)": true,
		"/dev/zerofs/x": false, "/dev/zero2": false, "/dev/zero (deleted) ": false, "/dev/zero/x": false,
		"/usr/lib/libc.so.6": false, "anon_inode:[perf_event]": false,
	} {
		if got := Anonymous(procmaps.Mapping{Name: name}); got != want {
			t.Errorf("Anonymous(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestShmemDevice: shared memory (memfd, System V, shared /dev/zero) only
// counts on the kernel's internal shmem device, which the maps line shows;
// a file of that name elsewhere (a FUSE mount in the process's mount
// namespace) is a file. Maps-line fixtures; the device is this kernel's.
func TestShmemDevice(t *testing.T) {
	shm, ok := shmemDevice()
	if !ok {
		t.Fatal("shmem device unknown (memfd_create failed)")
	}
	fuse := procmaps.Dev{Major: 0, Minor: shm.Minor + 0x29}
	for _, tc := range []struct {
		name  string
		dev   procmaps.Dev
		inode uint64
		want  bool
	}{
		{"/memfd:OTEL_CTX (deleted)", shm, 1234, true},
		{"/memfd:OTEL_CTX (deleted)", fuse, 1234, false},
		{"/SYSV00000000 (deleted)", shm, 0, true},
		{"/SYSV00000000 (deleted)", fuse, 0, false},
		{"/dev/zero (deleted)", shm, 27415, true},
		{"/dev/zero (deleted)", fuse, 27415, false},
		{"/dev/zero", procmaps.Dev{Minor: 6}, 4, true}, // private: anonymous pages
		{"", procmaps.Dev{}, 0, true},
		{"", fuse, 7, false},
		{"[heap]", procmaps.Dev{}, 0, true},
		{"/dev/zerofs/x", fuse, 7, false},
	} {
		if got := anonymousMapping([]byte(tc.name), tc.dev, tc.inode); got != tc.want {
			t.Errorf("anonymousMapping(%q, %+v, %d) = %v, want %v", tc.name, tc.dev, tc.inode, got, tc.want)
		}
	}
}

// TestFileNamedLikeAnonymous: a file mapping whose path starts like an
// anonymous name is read only where resident. The maps file is a fixture
// listing the test's own (never touched) pages under such names; the
// pagemap fixture says none is resident.
func TestFileNamedLikeAnonymous(t *testing.T) {
	page := os.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 5*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(mem) })
	base := addrOf(mem)
	shm, _ := shmemDevice()
	names := []struct {
		line string
		anon bool
	}{
		{"00:2a 7 /dev/zerofs/x", false},
		{"00:2a 8 /memfd:x/payload (deleted)", false},
		{"00:2a 9 /SYSV0000002a/x", false},
		{fmt.Sprintf("%02x:%02x 10 /memfd:OTEL_CTX (deleted)", shm.Major, shm.Minor), true},
		{"00:00 0 ", true},
	}
	var lines []string
	for i, n := range names {
		lo := base + uint64(i*page)
		lines = append(lines, fmt.Sprintf("%x-%x rw-s 00000000 %s", lo, lo+uint64(page), n.line))
	}
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pagemap"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "pagemap"), int64((base/uint64(page)+uint64(len(names)))*8)); err != nil {
		t.Fatal(err)
	}
	m := New(root, os.Getpid())
	buf := make([]byte, 8)
	for i, n := range names {
		err := m.ReadAt(buf, base+uint64(i*page))
		if n.anon && err != nil {
			t.Errorf("%q: %v, want read", n.line, err)
		}
		if !n.anon && !errors.Is(err, ErrFileBacked) {
			t.Errorf("%q: %v, want ErrFileBacked (a file page not resident)", n.line, err)
		}
	}
}

// TestDevZeroByDevice: a mapping named /dev/zero is anonymous only if the
// mapped node is the character device 1:5 (a file at that path in the
// publisher's mount namespace, e.g. on FUSE, is read only where
// resident). The maps and pagemap files are fixtures over the test's own
// untouched pages; map_files links lead to the real /dev/zero and to a
// regular file.
func TestDevZeroByDevice(t *testing.T) {
	page := os.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 3*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(mem) })
	base := addrOf(mem)
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(filepath.Join(dir, "map_files"), 0o755); err != nil {
		t.Fatal(err)
	}
	regular := filepath.Join(root, "zero")
	if err := os.WriteFile(regular, make([]byte, page), 0o644); err != nil {
		t.Fatal(err)
	}
	targets := []struct {
		link string // "" for no map_files entry (no right to it)
		anon bool
	}{{"/dev/zero", true}, {regular, false}, {"", false}}
	var lines []string
	for i, tg := range targets {
		lo, hi := base+uint64(i*page), base+uint64((i+1)*page)
		lines = append(lines, fmt.Sprintf("%x-%x rw-p 00000000 00:06 4 /dev/zero", lo, hi))
		if tg.link != "" {
			if err := os.Symlink(tg.link, filepath.Join(dir, "map_files", fmt.Sprintf("%x-%x", lo, hi))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pagemap"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "pagemap"), int64((base/uint64(page)+uint64(len(targets)))*8)); err != nil {
		t.Fatal(err)
	}
	m := New(root, os.Getpid())
	buf := make([]byte, 8)
	for i, tg := range targets {
		err := m.ReadAt(buf, base+uint64(i*page))
		if tg.anon && err != nil {
			t.Errorf("/dev/zero -> %q: %v, want read", tg.link, err)
		}
		if !tg.anon && !errors.Is(err, ErrFileBacked) {
			t.Errorf("/dev/zero -> %q: %v, want ErrFileBacked (not the device 1:5)", tg.link, err)
		}
	}
}

// TestMappingListBounded: a publisher's mapping list costs at most
// maxRegions entries while read, and no more than keepRegions between
// rounds.
func TestMappingListBounded(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "4242")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := range maxRegions + 100 {
		lo := uint64(0x10000000) + uint64(i)*0x2000 // a hole between each: no merging
		fmt.Fprintf(&b, "%x-%x r--p 00000000 08:01 %d /usr/lib/x%d.so\n", lo, lo+0x1000, i+1, i)
	}
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	m := New(root, 4242)
	if err := m.Load(); err != nil {
		t.Fatal(err)
	}
	if len(m.regions) != maxRegions {
		t.Errorf("%d regions loaded, want the cap %d", len(m.regions), maxRegions)
	}
	m.Reset()
	if cap(m.regions) > keepRegions {
		t.Errorf("after Reset, %d regions kept, want at most %d", cap(m.regions), keepRegions)
	}
}

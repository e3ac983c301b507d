// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddscan_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/procmaps"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
)

// unwrittenMappings maps n private anonymous mappings of two pages each in
// the test process, never written, separated by one-page holes so that the
// kernel keeps them apart (as a JVM's many small mappings are), and returns
// the whole region (holes included) and their start addresses in address
// order.
func unwrittenMappings(t *testing.T, n int) ([]byte, []uint64) {
	t.Helper()
	page := os.Getpagesize()
	region, err := syscall.Mmap(-1, 0, 3*n*page, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE)
	if err != nil {
		t.Fatal(err)
	}
	base := uintptr(unsafe.Pointer(&region[0]))
	t.Cleanup(func() {
		if _, _, errno := syscall.Syscall(syscall.SYS_MUNMAP, base, uintptr(3*n*page), 0); errno != 0 {
			t.Errorf("munmap: %v", errno)
		}
	})
	starts := make([]uint64, n)
	for i := range n {
		starts[i] = uint64(base) + uint64(3*i*page)
		if _, _, errno := syscall.Syscall(syscall.SYS_MUNMAP, base+uintptr((3*i+2)*page), uintptr(page), 0); errno != 0 {
			t.Fatalf("munmap hole %d: %v", i, errno)
		}
	}
	return region, starts
}

// putHeader writes a valid header of capacity slots at the start of h.
func putHeader(h []byte, capacity uint32) {
	binary.NativeEndian.PutUint32(h[0:], ddotel.Magic)
	binary.NativeEndian.PutUint32(h[4:], 1)
	binary.NativeEndian.PutUint32(h[8:], capacity)
	binary.NativeEndian.PutUint32(h[12:], ddotel.SlotSize)
}

// TestDiscoverManyUnwrittenMappings: a process with 30,000 unwritten
// read-write anonymous mappings (a JVM can have up to vm.max_map_count)
// costs a bounded number of pagemap reads per discovery, at the mapping
// starts and inside the mappings alike; a buffer among them is still found.
func TestDiscoverManyUnwrittenMappings(t *testing.T) {
	const n = 30000
	region, starts := unwrittenMappings(t, n)
	pid := os.Getpid()
	maxReads := 2 * ddscan.MaxPagemapReads // the starts, then inside

	t0 := time.Now()
	_, st, err := ddscan.Discover("/proc", safemem.New("", pid))
	took := time.Since(t0)
	if !errors.Is(err, ddscan.ErrNotFound) {
		t.Fatalf("Discover: %v (%+v)", err, st)
	}
	t.Logf("no buffer, %d unwritten mappings: %v, %d pagemap reads, %d candidates read, %d unwritten, %d skipped, %d pagemap entries inside",
		n, took, st.PagemapReads, st.Candidates, st.Unwritten, st.Skipped, st.PagemapEntries)
	if st.PagemapReads > maxReads {
		t.Errorf("%d pagemap reads for %d unwritten mappings, want at most %d", st.PagemapReads, n, maxReads)
	}

	// A buffer at the start of one of them (its page written now) is found.
	putHeader(region[starts[100]-starts[0]:], 16)
	t0 = time.Now()
	b, st, err := ddscan.Discover("/proc", safemem.New("", pid))
	took = time.Since(t0)
	if err != nil || b.Addr != starts[100] || b.Capacity != 16 {
		t.Fatalf("Discover = %+v, %v (%+v); want the buffer at %#x", b, err, st, starts[100])
	}
	t.Logf("buffer at mapping 100: %v, %d pagemap reads", took, st.PagemapReads)
	if st.PagemapReads > ddscan.MaxPagemapReads {
		t.Errorf("%d pagemap reads, want at most %d", st.PagemapReads, ddscan.MaxPagemapReads)
	}
}

// fakePagemap makes a procfs fixture for pid whose pagemap has the given
// entries (by page number; all others are zero: never written).
func fakePagemap(t *testing.T, pid int, entries map[uint64]uint64) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "pagemap"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for pg, e := range entries {
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], e)
		if _, err := f.WriteAt(b[:], int64(pg*8)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestProbeInsideSkipsSwappedPages: the search inside merged mappings reads
// only pages in the process's page tables; a swapped-out page would be
// read back from swap (blocking I/O, in a process that may have no buffer
// at all) and is left for a later search. The pages' residency comes from a
// pagemap fixture (the test machine has no swap); the memory read is the
// test process's own.
func TestProbeInsideSkipsSwappedPages(t *testing.T) {
	const (
		present = 1 << 63
		swapped = 1 << 62
	)
	page := uint64(os.Getpagesize())
	mem, err := syscall.Mmap(-1, 0, int(4*page), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(mem) })
	start := uint64(uintptr(unsafe.Pointer(&mem[0])))
	m := procmaps.Mapping{Start: start, End: start + 4*page, Perms: "rw-p"}
	// Headers on page 1 (swapped) and page 3 (present): only page 3 is read.
	putHeader(mem[page:], 16)
	putHeader(mem[3*page:], 16)
	first := start / page
	root := fakePagemap(t, os.Getpid(), map[uint64]uint64{
		first: present, first + 1: swapped, first + 2: swapped, first + 3: present,
	})
	b, st, err := ddscan.ProbeInside(root, safemem.New(root, os.Getpid()), []procmaps.Mapping{m})
	if err != nil || b.Addr != start+3*page || st.Valid != 1 {
		t.Fatalf("ProbeInside = %+v, %+v, %v; want the present page's buffer at %#x alone", b, st, err, start+3*page)
	}
	if st.InsideProbes != 1 {
		t.Fatalf("%d pages probed, want 1 (the swapped ones must not be read)", st.InsideProbes)
	}
	// Only swapped pages: nothing read, nothing found.
	root = fakePagemap(t, os.Getpid(), map[uint64]uint64{first: present, first + 1: swapped, first + 3: swapped})
	if _, st, err := ddscan.ProbeInside(root, safemem.New(root, os.Getpid()), []procmaps.Mapping{m}); !errors.Is(err, ddscan.ErrNotFound) || st.InsideProbes != 0 {
		t.Fatalf("swapped only: %+v, %v; want not found, nothing probed", st, err)
	}
}

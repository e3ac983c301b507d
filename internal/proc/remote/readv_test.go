// SPDX-License-Identifier: Apache-2.0

//go:build linux

package remote

import (
	"os"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestReadEach: every readable range is read, an unmapped one (whole or
// partly) is marked and skipped without losing the ranges after it, and a
// range listed twice is read twice.
func TestReadEach(t *testing.T) {
	page := os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 3*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := unix.Munmap(mem); err != nil {
			t.Error(err)
		}
	}()
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	copy(mem, "first page")
	copy(mem[2*page:], "third page")
	// Unmap the middle page: ranges in it, or crossing into it, fail.
	if _, _, errno := unix.Syscall(unix.SYS_MUNMAP, uintptr(base)+uintptr(page), uintptr(page), 0); errno != 0 {
		t.Fatal(errno)
	}
	addrs := []uint64{base, base + uint64(page), base + uint64(2*page), base + uint64(page) - 4, base, base + uint64(2*page)}
	bufs := make([][]byte, len(addrs))
	for i := range bufs {
		bufs[i] = make([]byte, 10)
	}
	ok := make([]bool, len(addrs))
	calls, err := Memory{PID: os.Getpid()}.ReadEach(bufs, addrs, ok)
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, true, false, true, true}; !slices.Equal(ok, want) {
		t.Fatalf("ok = %v, want %v", ok, want)
	}
	if string(bufs[0]) != "first page" || string(bufs[2]) != "third page" || string(bufs[4]) != "first page" || string(bufs[5]) != "third page" {
		t.Fatalf("read %q", bufs)
	}
	if calls != 3 { // stops at range 1 and at range 3
		t.Errorf("%d calls, want 3", calls)
	}

	// Many ranges: split at MaxIovecs.
	n := MaxIovecs*2 + 3
	addrs, bufs, ok = make([]uint64, n), make([][]byte, n), make([]bool, n)
	for i := range addrs {
		addrs[i], bufs[i] = base+uint64(i%8), make([]byte, 1)
	}
	calls, err = Memory{PID: os.Getpid()}.ReadEach(bufs, addrs, ok)
	if err != nil || calls != 3 || slices.Contains(ok, false) {
		t.Fatalf("%d ranges: %d calls, %v, all ok %v", n, calls, err, !slices.Contains(ok, false))
	}
	if _, err := (Memory{PID: os.Getpid()}).ReadEach(bufs, addrs[:1], ok); err == nil {
		t.Fatal("mismatched lengths accepted")
	}
}

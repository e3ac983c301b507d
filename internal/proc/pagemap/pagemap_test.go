// SPDX-License-Identifier: Apache-2.0

//go:build linux

package pagemap

import (
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestEntriesOfOwnPages: a page this process wrote is present and written;
// a page of a fresh private anonymous mapping it never touched is neither,
// and reading the entries did not fault it in.
func TestEntriesOfOwnPages(t *testing.T) {
	page := os.Getpagesize()
	m, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Munmap(m) }()
	m[0] = 1
	addr := uint64(uintptr(unsafe.Pointer(&m[0])))
	f, err := Open("", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 2 { // the second read reuses the buffers
		ents, err := f.Read(addr/uint64(page), 2)
		if err != nil {
			t.Fatal(err)
		}
		if !ents[0].Present() || !ents[0].Written() || !ents[0].Resident() {
			t.Errorf("written page: entry %#x", uint64(ents[0]))
		}
		if ents[1].Present() || ents[1].Written() || ents[1].Resident() {
			t.Errorf("untouched page: entry %#x", uint64(ents[1]))
		}
		if AllPresent(ents) || !AllPresent(ents[:1]) {
			t.Errorf("AllPresent disagrees with the entries %#x", ents)
		}
	}
	if f.Reads != 2 || f.Entries != 4 {
		t.Errorf("Reads %d, Entries %d; want 2, 4", f.Reads, f.Entries)
	}
}

func TestEntryBits(t *testing.T) {
	for _, c := range []struct {
		e                          Entry
		present, written, resident bool
	}{
		{0, false, false, false},
		{present, true, true, true},
		{swapped, false, true, true},
		{swapped | fileOrShared, false, true, false},
		{present | fileOrShared, true, true, true},
	} {
		if c.e.Present() != c.present || c.e.Written() != c.written || c.e.Resident() != c.resident {
			t.Errorf("%#x: present %v written %v resident %v", uint64(c.e), c.e.Present(), c.e.Written(), c.e.Resident())
		}
	}
}

func TestReadErrors(t *testing.T) {
	if _, err := Open("", -1); err == nil {
		t.Error("Open(-1) succeeded")
	}
	var closed *File
	if _, err := closed.Read(0, 1); err == nil {
		t.Error("Read on a nil File succeeded")
	}
	f, err := Open("", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Read(0, 0); err == nil {
		t.Error("Read of 0 entries succeeded")
	}
	f.Close()
	if _, err := f.Read(0, 1); err == nil {
		t.Error("Read after Close succeeded")
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package pagemap reads /proc/PID/pagemap: whether a process's pages are in
// its page tables, swapped out or never written, without touching them. A
// read of another process's memory that could fault a page in (a file on a
// stalled file system, swap, a userfaultfd range) is decided by these
// entries first.
package pagemap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/otelctx/otelctx/internal/proc/lockread"
)

// Entry is one page's 64-bit entry (Documentation/admin-guide/mm/pagemap.rst).
type Entry uint64

const (
	present      Entry = 1 << 63
	swapped      Entry = 1 << 62
	fileOrShared Entry = 1 << 61 // a page-cache (file) page, or shared anonymous memory
)

// Present: the page is in the page tables; reading it faults nothing in.
func (e Entry) Present() bool { return e&present != 0 }

// Written: a private anonymous page neither present nor swapped was never
// written; reading it would fault it in, or wait on a userfaultfd handler.
func (e Entry) Written() bool { return e&(present|swapped) != 0 }

// Resident: present, or the process's own page in swap (not a file's or
// shared memory's, whose swap-in is another file system's read).
func (e Entry) Resident() bool { return e.Present() || (e&swapped != 0 && e&fileOrShared == 0) }

// AllPresent: every entry is Present.
func AllPresent(ents []Entry) bool {
	for _, e := range ents {
		if !e.Present() {
			return false
		}
	}
	return true
}

// File is one process's pagemap held open (CAP_SYS_PTRACE over it, as for
// process_vm_readv). Not safe for concurrent use.
type File struct {
	procRoot string
	pid      int
	f        *lockread.File // its reads take the process's mmap lock
	raw      []byte
	ents     []Entry
	// Reads counts preads, Entries the entries they returned.
	Reads, Entries int
}

// Open opens pid's pagemap under procRoot ("" for /proc).
func Open(procRoot string, pid int) (*File, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	p := &File{procRoot: procRoot, pid: pid}
	if err := p.open(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *File) open() error {
	f, err := lockread.Open(p.procRoot+"/"+strconv.Itoa(p.pid)+"/pagemap", p.pid)
	if err != nil {
		return err
	}
	p.f = f
	return nil
}

// IsOpen: Close was not called, and no reopen after an exec failed.
func (p *File) IsOpen() bool { return p != nil && p.f != nil }

// Close releases the file; a closed (or nil) File reads nothing.
func (p *File) Close() error {
	if p == nil || p.f == nil {
		return nil
	}
	err := p.f.Close()
	p.f = nil
	return err
}

// Read returns n entries from page first with one pread (valid until the
// next call). A file opened before an exec describes the old address space
// and reads as empty: it is opened again once. The pread takes the
// process's mmap lock, so it runs under a deadline (package lockread): on
// lockread.ErrTimeout the file is given up (IsOpen turns false).
func (p *File) Read(first uint64, n int) ([]Entry, error) {
	if p == nil || p.f == nil {
		return nil, fmt.Errorf("pagemap: closed")
	}
	if n <= 0 {
		return nil, fmt.Errorf("pagemap of pid %d: %d entries", p.pid, n)
	}
	p.raw = slices.Grow(p.raw[:0], 8*n)[:8*n]
	for try := 0; ; try++ {
		p.Reads++
		got, err := p.f.ReadAt(p.raw, int64(first*8))
		if errors.Is(err, lockread.ErrTimeout) {
			// The abandoned pread still owns the file and p.raw.
			p.f, p.raw = nil, nil
			return nil, fmt.Errorf("pagemap of pid %d: %w", p.pid, err)
		}
		if got == len(p.raw) {
			break
		}
		if try > 0 || got != 0 {
			return nil, fmt.Errorf("pagemap of pid %d: %d entries at page %#x: read %d bytes: %w", p.pid, n, first, got, err)
		}
		p.f.Close()
		if err := p.open(); err != nil {
			p.f = nil
			return nil, fmt.Errorf("pagemap of pid %d: %w", p.pid, err)
		}
	}
	p.Entries += n
	p.ents = slices.Grow(p.ents[:0], n)[:n]
	for i := range p.ents {
		p.ents[i] = Entry(binary.NativeEndian.Uint64(p.raw[8*i:]))
	}
	return p.ents, nil
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package safemem

import (
	"encoding/binary"
	"os"
	"strconv"
)

// Pagemap is one process's /proc/PID/pagemap held open, for a caller that
// reads the same few addresses of the process again and again (the poll's
// stamp read): a range whose pages are all in the process's page tables is
// read without faulting anything in, so a Memory using it (UsePagemap)
// checks such a range with one pread instead of a read of the maps file.
// Not safe for concurrent use.
type Pagemap struct {
	procRoot string
	pid      int
	f        *os.File
	buf      []byte
	Reads    int
}

// OpenPagemap opens the pagemap of pid (CAP_SYS_PTRACE over it, as for
// process_vm_readv).
func OpenPagemap(procRoot string, pid int) (*Pagemap, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	p := &Pagemap{procRoot: procRoot, pid: pid}
	if err := p.open(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Pagemap) open() error {
	f, err := os.Open(p.procRoot + "/" + strconv.Itoa(p.pid) + "/pagemap")
	if err != nil {
		return err
	}
	p.f = f
	return nil
}

// Close releases the file; a closed Pagemap reports nothing present.
func (p *Pagemap) Close() error {
	if p == nil || p.f == nil {
		return nil
	}
	err := p.f.Close()
	p.f = nil
	return err
}

// present reports whether every page of [start, end) is in the page tables
// (at most maxResidencyPages; a longer range is not looked at).
func (p *Pagemap) present(start, end uint64) bool {
	if p == nil || p.f == nil || end <= start {
		return false
	}
	page := uint64(os.Getpagesize())
	first, last := start/page, (end-1)/page
	n := last - first + 1
	if n > maxResidencyPages {
		return false
	}
	b, ok := p.entries(first, n, &p.buf)
	if !ok {
		return false
	}
	for i := range n {
		if binary.NativeEndian.Uint64(b[i*8:])&pagePresent == 0 {
			return false
		}
	}
	return true
}

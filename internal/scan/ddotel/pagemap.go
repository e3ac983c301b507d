package ddotel

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
)

// pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
const (
	pagePresent = 1 << 63
	pageSwapped = 1 << 62
)

// written reports whether a pagemap entry is a page the process has: in
// its page tables or swapped out. A private anonymous page that is neither
// was never written (it reads as zeros), and reading it through
// process_vm_readv would fault it in: a zero page mapped into the target,
// or, in a range registered with userfaultfd, a wait on the target's fault
// handler for as long as it likes. The readers skip such pages.
func written(entry uint64) bool { return entry&(pagePresent|pageSwapped) != 0 }

// present reports whether a pagemap entry is a page in the process's page
// tables: reading it faults nothing in (a swapped page would be read back
// from swap, blocking the reader on disk I/O).
func present(entry uint64) bool { return entry&pagePresent != 0 }

// pagemap reads a process's /proc/PID/pagemap.
type pagemap struct {
	f    *os.File
	page uint64
	buf  []byte
	// reads and read are the preads made and the entries they returned.
	reads, read int
}

func openPagemap(procRoot string, pid int) (*pagemap, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	f, err := os.Open(procRoot + "/" + strconv.Itoa(pid) + "/pagemap")
	if err != nil {
		return nil, err
	}
	return &pagemap{f: f, page: uint64(os.Getpagesize())}, nil
}

func (p *pagemap) Close() error { return p.f.Close() }

// entries returns the entries of the n pages from the one holding addr
// (valid until the next call).
func (p *pagemap) entries(addr uint64, n int) ([]uint64, error) {
	if cap(p.buf) < 8*n {
		p.buf = make([]byte, 8*n)
	}
	b := p.buf[:8*n]
	p.reads++
	p.read += n
	got, err := p.f.ReadAt(b, int64(addr/p.page*8))
	if got < len(b) {
		return nil, fmt.Errorf("pagemap at %#x (%d pages): %w", addr, n, err)
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = binary.NativeEndian.Uint64(b[8*i:])
	}
	return out, nil
}

// pageWritten reports whether the page holding addr was written.
func (p *pagemap) pageWritten(addr uint64) (bool, error) {
	e, err := p.entries(addr, 1)
	if err != nil {
		return false, err
	}
	return written(e[0]), nil
}

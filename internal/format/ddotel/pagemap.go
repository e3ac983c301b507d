// SPDX-License-Identifier: Apache-2.0

//go:build linux

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

// written: a private anonymous page neither present nor swapped was never
// written; reading it would fault it in, or block on a userfaultfd handler.
func written(entry uint64) bool { return entry&(pagePresent|pageSwapped) != 0 }

// present: reading a swapped page would block on swap-in I/O.
func present(entry uint64) bool { return entry&pagePresent != 0 }

type pagemap struct {
	f           *os.File
	page        uint64
	buf         []byte
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

// entries returns n entries from addr's page (valid until the next call).
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

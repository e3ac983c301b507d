// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"io"
)

// blockReader serves the many small reads of hash walks from a few cached
// blocks; large reads (relocation tables, .symtab) go straight to the file
// into the scratch. Its buffers are allocated once per resolution.
type blockReader struct {
	src     io.ReaderAt
	scratch []byte // relocation and section header chunks, program headers + a note
	name    []byte // a wanted name and its NUL
	tmp     []byte // a header, an entry, a word
	blocks  [nBlocks]cachedBlock
	mem     []byte
}

const (
	blockSize   = 4096
	nBlocks     = 8
	scratchSize = 32 << 10
	// readerCost is what newBlockReader allocates.
	readerCost = scratchSize + nBlocks*blockSize + 64 + ehdrSize + 256
)

type cachedBlock struct {
	off   uint64
	n     int // valid bytes; 0: empty
	valid bool
}

func newBlockReader(src io.ReaderAt, size uint64, mem *memBudget) (*blockReader, error) {
	if err := mem.take(readerCost); err != nil {
		return nil, err
	}
	return &blockReader{src: src, scratch: make([]byte, scratchSize), name: make([]byte, 64), tmp: make([]byte, ehdrSize), mem: make([]byte, nBlocks*blockSize)}, nil
}

// reset points the reader at another file, keeping its buffers.
func (b *blockReader) reset(src io.ReaderAt) {
	b.src = src
	b.blocks = [nBlocks]cachedBlock{}
}

func (b *blockReader) readDirect(p []byte, off uint64) error {
	if off > 1<<62 {
		return malformed("offset %#x", off)
	}
	n, err := b.src.ReadAt(p, int64(off))
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		return malformed("short read at %#x", off)
	}
	return err
}

func (b *blockReader) readAt(p []byte, off uint64) error {
	if len(p) > blockSize/2 {
		return b.readDirect(p, off)
	}
	for len(p) > 0 {
		blk := off / blockSize
		slot := &b.blocks[blk%nBlocks]
		buf := b.mem[(blk%nBlocks)*blockSize : (blk%nBlocks+1)*blockSize]
		if !slot.valid || slot.off != blk*blockSize {
			n, err := b.src.ReadAt(buf, int64(blk*blockSize))
			if n == 0 && err != nil && err != io.EOF {
				return err
			}
			*slot = cachedBlock{off: blk * blockSize, n: n, valid: true}
		}
		in := int(off - slot.off)
		if in >= slot.n {
			return malformed("short read at %#x", off)
		}
		c := copy(p, buf[in:slot.n])
		p, off = p[c:], off+uint64(c)
	}
	return nil
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testfuse

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// The kernel's FUSE protocol (include/uapi/linux/fuse.h), the part this
// server speaks: 7.31 is old enough for every kernel with /dev/fuse in a
// container and new enough that every reply has its full size.
const (
	protoMajor = 7
	protoMinor = 31

	rootID = 1 // FUSE_ROOT_ID
	fileID = 2

	inHeaderSize  = 40 // struct fuse_in_header
	outHeaderSize = 16 // struct fuse_out_header
	attrSize      = 88 // struct fuse_attr
	initOutSize   = 64 // struct fuse_init_out

	maxWrite = 4096
	// bufSize holds any request: the kernel refuses a read(2) of /dev/fuse
	// shorter than a WRITE of its max_write, which before INIT is its own
	// default (up to FUSE_MAX_MAX_PAGES pages on recent kernels).
	bufSize = 1<<20 + 4096
)

// Opcodes (enum fuse_opcode).
const (
	opLookup      = 1
	opForget      = 2
	opGetattr     = 3
	opOpen        = 14
	opRead        = 15
	opRelease     = 18
	opFlush       = 25
	opInit        = 26
	opInterrupt   = 36
	opBatchForget = 42
)

// inHeader is struct fuse_in_header.
type inHeader struct {
	len    uint32
	opcode uint32
	unique uint64
	nodeid uint64
	pid    uint32
}

func parseInHeader(b []byte) (inHeader, bool) {
	if len(b) < inHeaderSize {
		return inHeader{}, false
	}
	le := binary.NativeEndian
	return inHeader{
		len:    le.Uint32(b[0:]),
		opcode: le.Uint32(b[4:]),
		unique: le.Uint64(b[8:]),
		nodeid: le.Uint64(b[16:]),
		pid:    le.Uint32(b[32:]),
	}, true
}

// reply is struct fuse_out_header (error is a negative errno) and body.
func reply(unique uint64, errno unix.Errno, body []byte) []byte {
	b := make([]byte, outHeaderSize+len(body))
	le := binary.NativeEndian
	le.PutUint32(b[0:], uint32(len(b)))
	le.PutUint32(b[4:], uint32(-int32(errno)))
	le.PutUint64(b[8:], unique)
	copy(b[outHeaderSize:], body)
	return b
}

// initOut is struct fuse_init_out: no optional feature (synchronous reads,
// no writeback cache, no splice), max_readahead as the kernel offered.
func initOut(maxReadahead uint32) []byte {
	b := make([]byte, initOutSize)
	le := binary.NativeEndian
	le.PutUint32(b[0:], protoMajor)
	le.PutUint32(b[4:], protoMinor)
	le.PutUint32(b[8:], maxReadahead)
	// max_background, congestion_threshold: 0 keeps the kernel's defaults
	le.PutUint32(b[20:], maxWrite)
	le.PutUint32(b[24:], 1) // time_gran (ns)
	return b
}

// attr is struct fuse_attr of the root directory or the file.
func attr(b []byte, ino, size uint64, mode uint32, uid, gid uint32) {
	le := binary.NativeEndian
	le.PutUint64(b[0:], ino)
	le.PutUint64(b[8:], size)
	le.PutUint64(b[16:], (size+511)/512) // blocks
	le.PutUint32(b[60:], mode)
	le.PutUint32(b[64:], 1) // nlink
	le.PutUint32(b[68:], uid)
	le.PutUint32(b[72:], gid)
	le.PutUint32(b[80:], 4096) // blksize
}

// validSecs is how long the kernel may cache names and attributes: the
// file never changes.
const validSecs = 3600

// entryOut is struct fuse_entry_out: nodeid, generation, entry_valid,
// attr_valid, their nsecs, then the attributes.
func entryOut(ino, size uint64, mode, uid, gid uint32) []byte {
	b := make([]byte, 40+attrSize)
	le := binary.NativeEndian
	le.PutUint64(b[0:], ino)
	le.PutUint64(b[16:], validSecs)
	le.PutUint64(b[24:], validSecs)
	attr(b[40:], ino, size, mode, uid, gid)
	return b
}

// attrOut is struct fuse_attr_out: attr_valid, its nsec, padding, attributes.
func attrOut(ino, size uint64, mode, uid, gid uint32) []byte {
	b := make([]byte, 16+attrSize)
	binary.NativeEndian.PutUint64(b[0:], validSecs)
	attr(b[16:], ino, size, mode, uid, gid)
	return b
}

// fopenNoFlush (FOPEN_NOFLUSH): a close does not wait for a FLUSH, so
// a test process can exit with the file open once its server is gone.
const fopenNoFlush = 1 << 5

// openOut is struct fuse_open_out: fh 1, no FOPEN_KEEP_CACHE (the page
// cache is dropped at each open, so a new mapping reads through the
// server), FOPEN_NOFLUSH.
func openOut() []byte {
	b := make([]byte, 16)
	binary.NativeEndian.PutUint64(b[0:], 1)
	binary.NativeEndian.PutUint32(b[8:], fopenNoFlush)
	return b
}

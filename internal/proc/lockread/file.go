// SPDX-License-Identifier: Apache-2.0

package lockread

import (
	"errors"
	"os"
	"sync/atomic"
)

// File is a /proc file of pid whose reads take pid's mmap lock (maps,
// pagemap): every Read and ReadAt runs under Do. Opening one takes no
// mmap lock. Not safe for concurrent use.
type File struct {
	f   *os.File
	pid int
	// abandoned: a read outlived its deadline; the file is its
	// goroutine's, which closes it.
	abandoned bool
}

// Open opens path, a file of pid.
func Open(path string, pid int) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return &File{f: f, pid: pid}, nil
}

// Read reads into p. After ErrTimeout, p is still written to by the
// abandoned read: the caller must not reuse it (Abandoned).
func (f *File) Read(p []byte) (int, error) { return f.do(p, -1) }

// ReadAt reads into p at off; ErrTimeout as for Read.
func (f *File) ReadAt(p []byte, off int64) (int, error) { return f.do(p, off) }

func (f *File) do(p []byte, off int64) (int, error) {
	if f.abandoned {
		return 0, ErrQuarantined
	}
	var n atomic.Int64 // written by the read, read after it
	osf := f.f
	err := Do(f.pid, func() error {
		var m int
		var err error
		if off < 0 {
			m, err = osf.Read(p)
		} else {
			m, err = osf.ReadAt(p, off)
		}
		n.Store(int64(m))
		return err
	}, func() { _ = osf.Close() })
	if errors.Is(err, ErrTimeout) {
		f.abandoned = true // the read may still run: it closes the file
		return 0, err
	}
	return int(n.Load()), err
}

// Abandoned reports that a read outlived its deadline: the buffer handed
// to it is still written to.
func (f *File) Abandoned() bool { return f != nil && f.abandoned }

// Close closes the file, unless a read of it was abandoned (its goroutine
// closes it when the kernel lets the read return).
func (f *File) Close() error {
	if f == nil || f.abandoned || f.f == nil {
		return nil
	}
	err := f.f.Close()
	f.f = nil
	return err
}

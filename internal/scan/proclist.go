// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"

	"golang.org/x/sys/unix"
)

// procEntry is one process directory of a procfs listing. procfs gives a
// new process's directory a new inode number, so a PID listed with another
// inode than before is another process (its PID reused): the listing tells
// it at no extra cost, for processes the scanner holds no pidfd for.
type procEntry struct {
	pid int
	ino uint64
}

// listing is a procfs listing sorted by PID.
type listing []procEntry

// find returns pid's entry.
func (l listing) find(pid int) (procEntry, bool) {
	i, ok := slices.BinarySearchFunc(l, pid, func(e procEntry, pid int) int { return e.pid - pid })
	if !ok {
		return procEntry{}, false
	}
	return l[i], true
}

// has reports whether pid is listed.
func (l listing) has(pid int) bool {
	_, ok := l.find(pid)
	return ok
}

// pidLister lists the process directories of a procfs mount with getdents64
// into a buffer reused across scans. Listing /proc is the one per-scan cost
// that grows with every process of the host; procfs.AllProcs added a name
// string and a Proc value per process, every scan, on top of the kernel's
// work.
type pidLister struct {
	root string
	buf  []byte
	ents listing
}

// list returns the process directories under root, sorted by PID. The
// slice is reused by the next call.
func (l *pidLister) list() (listing, error) {
	fd, err := unix.Open(l.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if l.buf == nil {
		l.buf = make([]byte, 32<<10)
	}
	ents := l.ents[:0]
	for {
		n, err := unix.Getdents(fd, l.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		ents = appendEntries(ents, l.buf[:n])
	}
	// procfs lists PIDs in ascending order; another file system (a test's
	// fake root) may not.
	byPID := func(a, b procEntry) int { return a.pid - b.pid }
	if !slices.IsSortedFunc(ents, byPID) {
		slices.SortFunc(ents, byPID)
	}
	l.ents = ents
	return ents, nil
}

// linux_dirent64: d_ino u64, d_off s64, d_reclen u16, d_type u8, d_name.
const (
	direntReclen = 16
	direntName   = 19
)

// appendEntries appends the all-digit names of the dirent64 records in b,
// with their inode numbers.
func appendEntries(ents listing, b []byte) listing {
	for len(b) >= direntName {
		reclen := int(binary.NativeEndian.Uint16(b[direntReclen:]))
		if reclen < direntName || reclen > len(b) {
			break
		}
		name := b[direntName:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		if pid, ok := parsePID(name); ok {
			ents = append(ents, procEntry{pid: pid, ino: binary.NativeEndian.Uint64(b)})
		}
		b = b[reclen:]
	}
	return ents
}

// parsePID parses a positive decimal PID; PIDs are below 2^22.
func parsePID(name []byte) (int, bool) {
	if len(name) == 0 || len(name) > 10 || name[0] == '0' {
		return 0, false
	}
	pid := 0
	for _, c := range name {
		if c < '0' || c > '9' {
			return 0, false
		}
		pid = pid*10 + int(c-'0')
	}
	return pid, pid <= 1<<30
}

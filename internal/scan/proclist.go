package scan

import (
	"bytes"
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"
)

// pidLister lists the process directories of a procfs mount with getdents64
// into a buffer reused across scans. Listing /proc is the one per-scan cost
// that grows with every process of the host; procfs.AllProcs added a name
// string and a Proc value per process, every scan, on top of the kernel's
// work.
type pidLister struct {
	root string
	buf  []byte
	pids []int
}

// list returns the PIDs under root. The slice is reused by the next call.
func (l *pidLister) list() ([]int, error) {
	fd, err := unix.Open(l.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if l.buf == nil {
		l.buf = make([]byte, 32<<10)
	}
	pids := l.pids[:0]
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
		pids = appendPIDs(pids, l.buf[:n])
	}
	l.pids = pids
	return pids, nil
}

// linux_dirent64: d_ino u64, d_off s64, d_reclen u16, d_type u8, d_name.
const (
	direntReclen = 16
	direntName   = 19
)

// appendPIDs appends the all-digit names of the dirent64 records in b.
func appendPIDs(pids []int, b []byte) []int {
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
			pids = append(pids, pid)
		}
		b = b[reclen:]
	}
	return pids
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

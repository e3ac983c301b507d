package procmaps

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Each calls fn for every mapping of pid, allocating nothing per line (a JVM
// has tens of thousands); name is a view into a reused buffer.
func Each(procRoot string, pid int, fn func(start, end uint64, name []byte)) error {
	return EachDev(procRoot, pid, func(start, end uint64, _ Dev, _ uint64, name []byte) { fn(start, end, name) })
}

// Dev is a mapping's "major:minor": 0:0 for anonymous memory, the kernel's
// shmem mount for shared memory.
type Dev struct{ Major, Minor uint32 }

func EachDev(procRoot string, pid int, fn func(start, end uint64, dev Dev, inode uint64, name []byte)) error {
	path := procRoot + "/" + strconv.Itoa(pid) + "/maps"
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), chunk)
	for sc.Scan() {
		l, ok := splitFields(sc.Bytes())
		if !ok {
			return fmt.Errorf("%s: %w: %q", path, ErrMalformed, sc.Bytes())
		}
		fn(l.start, l.end, l.dev, l.inode, l.name)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

type line struct {
	start, end uint64
	dev        Dev
	inode      uint64
	name       []byte
}

// splitLine: "start-end perms offset dev inode   name".
func splitLine(b []byte) (start, end uint64, name []byte, ok bool) {
	l, ok := splitFields(b)
	return l.start, l.end, l.name, ok
}

// splitFields accepts a line cut short after the bounds, device and inode zero.
func splitFields(b []byte) (l line, ok bool) {
	dash := bytes.IndexByte(b, '-')
	sp := bytes.IndexByte(b, ' ')
	if dash < 0 || sp < dash {
		return l, false
	}
	var err1, err2 error
	l.start, err1 = parseHex(b[:dash])
	l.end, err2 = parseHex(b[dash+1 : sp])
	if err1 != nil || err2 != nil || l.end < l.start {
		return line{}, false
	}
	rest := b[sp:]
	for field := range 4 { // perms, offset, dev, inode
		rest = bytes.TrimLeft(rest, " ")
		i := bytes.IndexByte(rest, ' ')
		f := rest
		if i >= 0 {
			f = rest[:i]
		}
		switch field {
		case 2:
			if c := bytes.IndexByte(f, ':'); c > 0 {
				major, e1 := parseHex(f[:c])
				minor, e2 := parseHex(f[c+1:])
				if e1 == nil && e2 == nil && major <= 0xffffffff && minor <= 0xffffffff {
					l.dev = Dev{Major: uint32(major), Minor: uint32(minor)}
				}
			}
		case 3:
			l.inode = parseDec(f)
		}
		if i < 0 {
			return l, len(rest) > 0
		}
		rest = rest[i:]
	}
	l.name = bytes.TrimSpace(rest)
	return l, true
}

// parseDec returns 0 for anything but a decimal inode.
func parseDec(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		d := uint64(c - '0')
		if c < '0' || c > '9' || v > (1<<64-1-d)/10 {
			return 0
		}
		v = v*10 + d
	}
	return v
}

func parseHex(b []byte) (uint64, error) {
	if len(b) == 0 || len(b) > 16 {
		return 0, ErrMalformed
	}
	var v uint64
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | uint64(c-'A'+10)
		default:
			return 0, ErrMalformed
		}
	}
	return v, nil
}

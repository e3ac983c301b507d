// SPDX-License-Identifier: Apache-2.0

package procmaps

import (
	"bytes"
	"fmt"
	"io"
	"strconv"

	"github.com/otelctx/otelctx/internal/proc/lockread"
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
	return EachLine(procRoot, pid, func(l *Line) { fn(l.Start, l.End, l.Dev, l.Inode, l.Name) })
}

// Line is one mapping as EachLine reads it; Name and Raw (the whole line,
// for ParseLine) are views into a reused buffer, valid during the call.
type Line struct {
	Start, End uint64
	Dev        Dev
	Inode      uint64
	Name, Raw  []byte
}

// EachLine calls fn for every mapping of pid, reading the file in 64 KiB
// chunks of whole lines from a pool. Each read takes the process's mmap
// lock: it runs under a deadline (package lockread).
func EachLine(procRoot string, pid int, fn func(*Line)) error {
	path := procRoot + "/" + strconv.Itoa(pid) + "/maps"
	f, err := lockread.Open(path, pid)
	if err != nil {
		return err
	}
	defer f.Close()
	var l Line
	err = eachLine(f, func(b []byte) bool {
		fl, ok := splitFields(b)
		if !ok {
			return false
		}
		l = Line{Start: fl.start, End: fl.end, Dev: fl.dev, Inode: fl.inode, Name: fl.name, Raw: b}
		fn(&l)
		return true
	})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// eachLine calls fn for each line of r (without its newline); fn returns
// false for a malformed line.
func eachLine(r io.Reader, fn func([]byte) bool) error {
	bp := chunks.Get().(*[]byte)
	defer func() {
		if a, ok := r.(interface{ Abandoned() bool }); !ok || !a.Abandoned() {
			chunks.Put(bp) // else an abandoned read still writes into it
		}
	}()
	buf := *bp
	carry := 0
	for {
		n, err := r.Read(buf[carry:])
		data := buf[:carry+n]
		eof := err == io.EOF
		if err != nil && !eof {
			return err
		}
		last := bytes.LastIndexByte(data, '\n')
		complete := data
		if !eof {
			if last < 0 {
				if len(data) == len(buf) {
					return fmt.Errorf("%w: line longer than %d bytes", ErrMalformed, chunk)
				}
				carry = len(data)
				continue
			}
			complete = data[:last+1]
		}
		for len(complete) > 0 {
			i := bytes.IndexByte(complete, '\n')
			line := complete
			if i >= 0 {
				line, complete = complete[:i], complete[i+1:]
			} else {
				complete = nil
			}
			if len(line) > 0 && !fn(line) {
				return fmt.Errorf("%w: %q", ErrMalformed, line)
			}
		}
		if eof {
			return nil
		}
		carry = copy(buf, data[last+1:])
	}
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

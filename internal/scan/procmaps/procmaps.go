// Package procmaps finds mappings by name in /proc/PID/maps.
//
// prometheus/procfs parses every line of a maps file into a struct; a JVM has
// tens of thousands of mappings and we want one or two of them, so this
// package scans the file for the names first and parses only matching lines.
package procmaps

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64
	Perms      string // e.g. "rw-p"
	Offset     uint64
	Name       string // pathname or pseudo-name, "" for plain anonymous memory
}

// Size is the length of the mapping in bytes.
func (m Mapping) Size() uint64 { return m.End - m.Start }

// ErrMalformed means a line of the maps file could not be parsed.
var ErrMalformed = errors.New("malformed maps line")

// FindNamed returns the mappings of process pid (under procRoot, normally
// "/proc") whose name contains needle and which satisfy accept (nil accepts
// all). Lines are only parsed when they contain needle.
func FindNamed(procRoot string, pid int, needle string, accept func(Mapping) bool) ([]Mapping, error) {
	out, _, err := FindNamedAlso(procRoot, pid, needle, "", accept)
	return out, err
}

// FindNamedAlso is FindNamed that also reports whether also (when not "")
// occurs anywhere in the maps file, in the same pass (e.g. whether
// "/libjvm.so" is mapped, while looking for OTEL_CTX).
func FindNamedAlso(procRoot string, pid int, needle, also string, accept func(Mapping) bool) ([]Mapping, bool, error) {
	path := procRoot + "/" + strconv.Itoa(pid) + "/maps"
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	var alsoB []byte
	if also != "" {
		alsoB = []byte(also)
	}
	out, found, err := scanAlso(f, []byte(needle), alsoB, accept)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	return out, found, nil
}

// bufPool-free: one 64 KiB buffer per call is cheap next to the syscalls, and
// calls happen only for new or invalidated PIDs.
const chunk = 64 << 10

func scan(r io.Reader, needle []byte, accept func(Mapping) bool) ([]Mapping, error) {
	out, _, err := scanAlso(r, needle, nil, accept)
	return out, err
}

// scanAlso is scan that also reports whether also (nil: not looked for)
// occurs in the file.
func scanAlso(r io.Reader, needle, also []byte, accept func(Mapping) bool) ([]Mapping, bool, error) {
	var out []Mapping
	found := false
	buf := make([]byte, chunk)
	carry := 0 // bytes of an incomplete last line kept at the start of buf
	for {
		n, err := r.Read(buf[carry:])
		data := buf[:carry+n]
		eof := err == io.EOF
		if err != nil && !eof {
			return out, found, err
		}
		// Process complete lines only; keep the tail for the next read.
		last := bytes.LastIndexByte(data, '\n')
		complete := data
		if !eof {
			if last < 0 {
				if len(data) == len(buf) {
					return out, found, fmt.Errorf("%w: line longer than %d bytes", ErrMalformed, chunk)
				}
				carry = len(data)
				continue
			}
			complete = data[:last+1]
		}
		// Whole lines only, each looked at once: a name cannot straddle
		// two reads.
		if also != nil && !found {
			found = bytes.Contains(complete, also)
		}
		for len(complete) > 0 {
			i := bytes.Index(complete, needle)
			if i < 0 {
				break
			}
			start := bytes.LastIndexByte(complete[:i], '\n') + 1
			end := bytes.IndexByte(complete[i:], '\n')
			if end < 0 {
				end = len(complete)
			} else {
				end += i
			}
			m, perr := ParseLine(complete[start:end])
			if perr != nil {
				return out, found, perr
			}
			if accept == nil || accept(m) {
				out = append(out, m)
			}
			if end >= len(complete) {
				break
			}
			complete = complete[end+1:]
		}
		if eof {
			return out, found, nil
		}
		carry = copy(buf, data[last+1:])
	}
}

// ParseLine parses one line of a maps file:
//
//	7f1c2a000000-7f1c2a001000 rw-p 00000000 00:01 1234    /memfd:OTEL_CTX (deleted)
func ParseLine(line []byte) (Mapping, error) {
	var m Mapping
	fields := [5][]byte{}
	rest := line
	for i := 0; i < 5; i++ {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexByte(rest, ' ')
		if j < 0 {
			if i < 4 {
				return m, fmt.Errorf("%w: %q", ErrMalformed, line)
			}
			j = len(rest)
		}
		fields[i], rest = rest[:j], rest[j:]
	}
	dash := bytes.IndexByte(fields[0], '-')
	if dash < 0 {
		return m, fmt.Errorf("%w: %q", ErrMalformed, line)
	}
	var err1, err2, err3 error
	m.Start, err1 = strconv.ParseUint(string(fields[0][:dash]), 16, 64)
	m.End, err2 = strconv.ParseUint(string(fields[0][dash+1:]), 16, 64)
	m.Offset, err3 = strconv.ParseUint(string(fields[2]), 16, 64)
	if err1 != nil || err2 != nil || err3 != nil || m.End < m.Start || len(fields[1]) != 4 {
		return m, fmt.Errorf("%w: %q", ErrMalformed, line)
	}
	m.Perms = string(fields[1])
	// fields[3] is dev, fields[4] the inode; the name follows after padding.
	m.Name = string(bytes.TrimSpace(rest))
	return m, nil
}

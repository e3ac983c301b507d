// Package procmaps finds mappings in /proc/PID/maps: a JVM has tens of
// thousands, so names are searched first and only matching lines are parsed.
package procmaps

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
)

type Mapping struct {
	Start, End uint64
	Perms      string // e.g. "rw-p"
	Offset     uint64
	Name       string // pathname or pseudo-name, "" for plain anonymous memory
}

func (m Mapping) Size() uint64 { return m.End - m.Start }

var ErrMalformed = errors.New("malformed maps line")

// FindNamed returns the mappings whose name contains needle (accept nil: all).
func FindNamed(procRoot string, pid int, needle string, accept func(Mapping) bool) ([]Mapping, error) {
	out, _, err := FindNamedAlso(procRoot, pid, needle, "", accept)
	return out, err
}

// FindNamedAlso also reports, in the same pass, whether also occurs anywhere
// (e.g. "/libjvm.so" while looking for OTEL_CTX).
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

// chunk: one 64 KiB buffer per call is cheap next to the syscalls, made only
// for new or invalidated PIDs.
const chunk = 64 << 10

// chunks recycles the read buffers: a discovery round reads the maps of
// every new process, and a fresh 64 KiB each was most of the garbage.
var chunks = sync.Pool{New: func() any { b := make([]byte, chunk); return &b }}

func scan(r io.Reader, needle []byte, accept func(Mapping) bool) ([]Mapping, error) {
	out, _, err := scanAlso(r, needle, nil, accept)
	return out, err
}

func scanAlso(r io.Reader, needle, also []byte, accept func(Mapping) bool) ([]Mapping, bool, error) {
	var out []Mapping
	found := false
	bp := chunks.Get().(*[]byte)
	defer chunks.Put(bp)
	buf := *bp
	carry := 0 // bytes of an incomplete last line kept at the start of buf
	for {
		n, err := r.Read(buf[carry:])
		data := buf[:carry+n]
		eof := err == io.EOF
		if err != nil && !eof {
			return out, found, err
		}
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
		// Whole lines only, so a name cannot straddle two reads.
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

// ParseLine parses e.g.
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
	m.Name = string(bytes.TrimSpace(rest))
	return m, nil
}

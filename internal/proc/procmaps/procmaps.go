// SPDX-License-Identifier: Apache-2.0

// Package procmaps finds mappings in /proc/PID/maps: a JVM has tens of
// thousands, so names are searched first and only matching lines are parsed.
package procmaps

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/otelctx/otelctx/internal/proc/lockread"
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
	path := procRoot + "/" + strconv.Itoa(pid) + "/maps"
	f, err := lockread.Open(path, pid) // its reads take pid's mmap lock
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out, err := scan(f, []byte(needle), accept)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// chunk: one 64 KiB buffer per call is cheap next to the syscalls, made only
// for new or invalidated PIDs.
const chunk = 64 << 10

// chunks recycles the read buffers: a discovery round reads the maps of
// every new process, and a fresh 64 KiB each was most of the garbage.
var chunks = sync.Pool{New: func() any { b := make([]byte, chunk); return &b }}

// scan parses only the lines that contain needle.
func scan(r io.Reader, needle []byte, accept func(Mapping) bool) ([]Mapping, error) {
	var out []Mapping
	err := eachLine(r, func(line []byte) bool {
		if !bytes.Contains(line, needle) {
			return true
		}
		m, err := ParseLine(line)
		if err != nil {
			return false
		}
		if accept == nil || accept(m) {
			out = append(out, m)
		}
		return true
	})
	return out, err
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

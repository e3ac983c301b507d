// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
)

type mapping struct {
	start, end, offset uint64
}

// maxModules bounds the files mapped at offset 0 (module candidates: each
// is opened) a resolution considers; a process mapping more is refused.
const maxModules = 4096

// mappingCost is what a module candidate costs besides its path and key.
const mappingCost = 160

// readModules groups the file-backed mappings of a maps file by file, as
// it reads them: a module starts at an offset-0 mapping (the ELF header),
// and the same file mapped twice is split where a new one starts. Only
// the candidates are kept (a line's strings are not), accounted in mem;
// entry (AT_ENTRY, 0: unknown) marks the executable's mappings.
func readModules(r io.Reader, entry uint64, mem *memBudget) ([]*moduleMaps, error) {
	var out []*moduleMaps
	open := map[string]*moduleMaps{}
	var key []byte
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var f [5][]byte
		rest := line
		for i := range f {
			rest = bytes.TrimLeft(rest, " ")
			j := bytes.IndexByte(rest, ' ')
			if j < 0 {
				j = len(rest)
			}
			f[i], rest = rest[:j], rest[j:]
		}
		path := bytes.TrimLeft(rest, " ")
		if len(path) == 0 || path[0] != '/' {
			continue
		}
		se := bytes.IndexByte(f[0], '-')
		if se < 0 {
			return nil, malformedMaps(line)
		}
		start, err1 := strconv.ParseUint(string(f[0][:se]), 16, 64)
		end, err2 := strconv.ParseUint(string(f[0][se+1:]), 16, 64)
		off, err3 := strconv.ParseUint(string(f[2]), 16, 64)
		ino, err4 := strconv.ParseUint(string(f[4]), 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			return nil, malformedMaps(line)
		}
		if ino == 0 {
			continue // e.g. /SYSV shared memory, /dev/zero: not a file we can parse
		}
		key = append(append(append(append(key[:0], f[3]...), ':'), f[4]...), ':')
		key = append(key, path...)
		cur := open[string(key)]
		if off == 0 || cur == nil {
			if off != 0 {
				continue // data file mapped at an offset, no header: not a module
			}
			if len(out) == maxModules {
				return nil, fmt.Errorf("%w: more than %d files mapped at offset 0", ErrLimit, maxModules)
			}
			if err := mem.take(mappingCost + 2*len(key)); err != nil {
				return nil, err
			}
			cur = &moduleMaps{path: string(path), dev: string(f[3]), inode: ino,
				first: mapping{start: start, end: end, offset: off}}
			open[string(key)] = cur
			out = append(out, cur)
		}
		cur.nmaps++
		if entry != 0 && entry >= start && entry < end {
			cur.holdsEntry = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func malformedMaps(line []byte) error {
	return fmt.Errorf("malformed maps line %q", line[:min(len(line), 200)])
}

// moduleMaps is one module candidate: a file and its mappings.
type moduleMaps struct {
	path  string
	dev   string
	inode uint64
	first mapping // the mapping with file offset 0 (the ELF header)
	nmaps int     // mappings of this module, first included
	// holdsEntry: a mapping holds AT_ENTRY (the executable).
	holdsEntry bool
}

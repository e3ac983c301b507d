// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

type mapping struct {
	start, end, offset uint64
	dev                string
	inode              uint64
	path               string
}

// parseMaps keeps file-backed mappings: nothing else can hold an ELF module.
func parseMaps(r io.Reader) ([]mapping, error) {
	var out []mapping
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
		path := strings.TrimLeft(string(rest), " ")
		if !strings.HasPrefix(path, "/") {
			continue
		}
		se := bytes.IndexByte(f[0], '-')
		if se < 0 {
			return nil, fmt.Errorf("malformed maps line %q", line)
		}
		start, err1 := strconv.ParseUint(string(f[0][:se]), 16, 64)
		end, err2 := strconv.ParseUint(string(f[0][se+1:]), 16, 64)
		off, err3 := strconv.ParseUint(string(f[2]), 16, 64)
		ino, err4 := strconv.ParseUint(string(f[4]), 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			return nil, fmt.Errorf("malformed maps line %q", line)
		}
		if ino == 0 {
			continue // e.g. /SYSV shared memory, /dev/zero: not a file we can parse
		}
		out = append(out, mapping{start: start, end: end, offset: off, dev: string(f[3]), inode: ino, path: path})
	}
	return out, sc.Err()
}

// moduleMaps groups mappings by file; the same file mapped twice is split
// where a new offset-0 mapping starts.
type moduleMaps struct {
	path     string
	dev      string
	inode    uint64
	first    mapping   // the mapping with file offset 0 (the ELF header)
	mappings []mapping // all of the module's mappings
}

func groupModules(ms []mapping) []*moduleMaps {
	var out []*moduleMaps
	open := map[string]*moduleMaps{}
	for _, m := range ms {
		key := m.dev + ":" + strconv.FormatUint(m.inode, 10) + ":" + m.path
		cur := open[key]
		if m.offset == 0 || cur == nil {
			if m.offset != 0 {
				continue // data file mapped at an offset, no header: not a module
			}
			cur = &moduleMaps{path: m.path, dev: m.dev, inode: m.inode, first: m}
			open[key] = cur
			out = append(out, cur)
		}
		cur.mappings = append(cur.mappings, m)
	}
	return out
}

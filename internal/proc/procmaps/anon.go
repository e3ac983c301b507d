// SPDX-License-Identifier: Apache-2.0

package procmaps

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
)

// FindAnonymous returns the private rw anonymous mappings of pid: unnamed,
// or "[anon:<name>]" when name is not "". Every rw-p line is parsed: a buffer
// found by magic has no name to search for.
func FindAnonymous(procRoot string, pid int, name string, accept func(Mapping) bool) ([]Mapping, error) {
	path := procRoot + "/" + strconv.Itoa(pid) + "/maps"
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out, err := scanAnonymous(f, name, accept)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

var permsRWP = []byte(" rw-p ")

func scanAnonymous(r io.Reader, name string, accept func(Mapping) bool) ([]Mapping, error) {
	named := ""
	if name != "" {
		named = "[anon:" + name + "]"
	}
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), chunk)
	for sc.Scan() {
		line := sc.Bytes()
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 || !bytes.HasPrefix(line[sp:], permsRWP) {
			continue
		}
		m, err := ParseLine(line)
		if err != nil {
			return out, err
		}
		if (m.Name == "" || (named != "" && m.Name == named)) && (accept == nil || accept(m)) {
			out = append(out, m)
		}
	}
	if err := sc.Err(); err != nil {
		if err == bufio.ErrTooLong {
			return out, fmt.Errorf("%w: line longer than %d bytes", ErrMalformed, chunk)
		}
		return out, err
	}
	return out, nil
}

package procmaps

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
)

// FindAnonymous returns the private read-write anonymous mappings of
// process pid: unnamed ones, and those named "[anon:<name>]" by
// prctl(PR_SET_VMA_ANON_NAME) when name is not "". Only lines with
// permissions rw-p are parsed; accept (nil accepts all) filters further.
// Unlike FindNamed there is no needle to search for: a buffer found by
// magic lives in a mapping without a name, so every line is looked at.
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
		// "start-end perms ...": the permissions follow the first space.
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

package procmaps

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Covering returns the mappings of pid that intersect [addr, addr+n), in
// address order. Only the address field of the other lines is parsed.
func Covering(procRoot string, pid int, addr, n uint64) ([]Mapping, error) {
	path := procRoot + "/" + strconv.Itoa(pid) + "/maps"
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out, err := covering(f, addr, n)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

func covering(r io.Reader, addr, n uint64) ([]Mapping, error) {
	end := addr + n
	if end < addr { // wraps: nothing can cover it
		return nil, nil
	}
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), chunk)
	for sc.Scan() {
		line := sc.Bytes()
		dash := bytes.IndexByte(line, '-')
		sp := bytes.IndexByte(line, ' ')
		if dash < 0 || sp < dash {
			return out, fmt.Errorf("%w: %q", ErrMalformed, line)
		}
		start, err1 := strconv.ParseUint(string(line[:dash]), 16, 64)
		stop, err2 := strconv.ParseUint(string(line[dash+1:sp]), 16, 64)
		if err1 != nil || err2 != nil {
			return out, fmt.Errorf("%w: %q", ErrMalformed, line)
		}
		if stop <= addr {
			continue
		}
		if start >= end {
			break // lines are in address order
		}
		m, err := ParseLine(line)
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

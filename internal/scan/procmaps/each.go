package procmaps

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Each calls fn for every mapping of pid, in address order, with its bounds
// and its name (a view into a reused buffer: copy what outlives the call).
// Nothing is allocated per line, so a caller can look at a JVM's tens of
// thousands of mappings cheaply.
func Each(procRoot string, pid int, fn func(start, end uint64, name []byte)) error {
	path := procRoot + "/" + strconv.Itoa(pid) + "/maps"
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), chunk)
	for sc.Scan() {
		start, end, name, ok := splitLine(sc.Bytes())
		if !ok {
			return fmt.Errorf("%s: %w: %q", path, ErrMalformed, sc.Bytes())
		}
		fn(start, end, name)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// splitLine takes the bounds and the name of a maps line without
// allocating: "start-end perms offset dev inode   name".
func splitLine(line []byte) (start, end uint64, name []byte, ok bool) {
	dash := bytes.IndexByte(line, '-')
	sp := bytes.IndexByte(line, ' ')
	if dash < 0 || sp < dash {
		return 0, 0, nil, false
	}
	var err1, err2 error
	start, err1 = parseHex(line[:dash])
	end, err2 = parseHex(line[dash+1 : sp])
	if err1 != nil || err2 != nil || end < start {
		return 0, 0, nil, false
	}
	rest := line[sp:]
	for range 4 { // perms, offset, dev, inode
		rest = bytes.TrimLeft(rest, " ")
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			return start, end, nil, len(rest) > 0
		}
		rest = rest[i:]
	}
	return start, end, bytes.TrimSpace(rest), true
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

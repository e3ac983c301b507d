// SPDX-License-Identifier: Apache-2.0

package procmaps

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// The four names a process context has in /proc/PID/maps (docs/process-context.md).
var contextNames = []string{
	"/memfd:OTEL_CTX (deleted)",
	"/memfd:OTEL_CTX",
	"[anon_shmem:OTEL_CTX]",
	"[anon:OTEL_CTX]",
}

func isContextName(m Mapping) bool {
	for _, n := range contextNames {
		if m.Name == n {
			return true
		}
	}
	return false
}

// mapsLine renders a line as the kernel does (show_map_vma): the name is
// padded to column 73.
func mapsLine(start, end uint64, perms string, off uint64, inode uint64, name string) string {
	l := fmt.Sprintf("%08x-%08x %s %08x fd:01 %d", start, end, perms, off, inode)
	if name != "" {
		l += strings.Repeat(" ", max(1, 73-len(l))) + name
	}
	return l
}

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Mapping
	}{
		{"7f1c2a000000-7f1c2a010000 rw-p 00000000 00:01 1234                       /memfd:OTEL_CTX (deleted)",
			Mapping{0x7f1c2a000000, 0x7f1c2a010000, "rw-p", 0, "/memfd:OTEL_CTX (deleted)"}},
		{"7f1c2a000000-7f1c2a010000 rw-s 00000000 00:01 1234                       /memfd:OTEL_CTX",
			Mapping{0x7f1c2a000000, 0x7f1c2a010000, "rw-s", 0, "/memfd:OTEL_CTX"}},
		{"7f1c2a000000-7f1c2a010000 rw-s 00000000 00:01 1234                       [anon_shmem:OTEL_CTX]",
			Mapping{0x7f1c2a000000, 0x7f1c2a010000, "rw-s", 0, "[anon_shmem:OTEL_CTX]"}},
		{"7f1c2a000000-7f1c2a010000 rw-p 00000000 00:00 0                          [anon:OTEL_CTX]",
			Mapping{0x7f1c2a000000, 0x7f1c2a010000, "rw-p", 0, "[anon:OTEL_CTX]"}},
		{"55d0c7c00000-55d0c7c21000 r--p 0001a000 fd:01 3146412                    /usr/lib/x86_64-linux-gnu/libc.so.6",
			Mapping{0x55d0c7c00000, 0x55d0c7c21000, "r--p", 0x1a000, "/usr/lib/x86_64-linux-gnu/libc.so.6"}},
		{"55d0c7c00000-55d0c7c21000 r-xp 00000000 fd:01 42                         /tmp/dir with spaces/lib x.so",
			Mapping{0x55d0c7c00000, 0x55d0c7c21000, "r-xp", 0, "/tmp/dir with spaces/lib x.so"}},
		{"7ffd2b9f4000-7ffd2b9f6000 rw-p 00000000 00:00 0 ",
			Mapping{0x7ffd2b9f4000, 0x7ffd2b9f6000, "rw-p", 0, ""}},
		{"7ffd2b9f4000-7ffd2b9f6000 rw-p 00000000 00:00 0",
			Mapping{0x7ffd2b9f4000, 0x7ffd2b9f6000, "rw-p", 0, ""}},
		{"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]",
			Mapping{0xffffffffff600000, 0xffffffffff601000, "--xp", 0, "[vsyscall]"}},
		{"00400000-00401000 r--p 00000000 08:02 173521      /usr/bin/dbus-daemon",
			Mapping{0x400000, 0x401000, "r--p", 0, "/usr/bin/dbus-daemon"}},
	} {
		m, err := ParseLine([]byte(tc.line))
		if err != nil {
			t.Errorf("ParseLine(%q): %v", tc.line, err)
			continue
		}
		if m != tc.want {
			t.Errorf("ParseLine(%q) = %+v, want %+v", tc.line, m, tc.want)
		}
	}
	if got := (Mapping{Start: 0x1000, End: 0x11000}).Size(); got != 0x10000 {
		t.Fatalf("Size = %#x", got)
	}

	for _, line := range []string{
		"",
		"7f1c2a000000-7f1c2a010000",
		"7f1c2a000000-7f1c2a010000 rw-p 00000000 00:01",
		"7f1c2a000000 rw-p 00000000 00:01 1234 /memfd:OTEL_CTX",
		"7f1c2a00000g-7f1c2a010000 rw-p 00000000 00:01 1234 /memfd:OTEL_CTX",
		"7f1c2a000000-7f1c2a01000x rw-p 00000000 00:01 1234 /memfd:OTEL_CTX",
		"7f1c2a010000-7f1c2a000000 rw-p 00000000 00:01 1234 /memfd:OTEL_CTX",
		"7f1c2a000000-7f1c2a010000 rw-p zz 00:01 1234 /memfd:OTEL_CTX",
		"7f1c2a000000-7f1c2a010000 rw- 00000000 00:01 1234 /memfd:OTEL_CTX",
		"7f1c2a000000-7f1c2a010000 rw-pp 00000000 00:01 1234 /memfd:OTEL_CTX",
		"10000000000000000-10000000000000001 rw-p 00000000 00:01 1234 /memfd:OTEL_CTX",
	} {
		if m, err := ParseLine([]byte(line)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseLine(%q) = %+v, %v; want ErrMalformed", line, m, err)
		}
	}
}

// reference finds the matching lines one by one, the obvious way.
func reference(data []byte, needle string, accept func(Mapping) bool) ([]Mapping, error) {
	var out []Mapping
	for _, line := range bytes.Split(data, []byte("\n")) {
		if !bytes.Contains(line, []byte(needle)) {
			continue
		}
		m, err := ParseLine(line)
		if err != nil {
			return out, err
		}
		if accept == nil || accept(m) {
			out = append(out, m)
		}
	}
	return out, nil
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// syntheticMaps is a maps file with filler mappings and one line for every
// context name, plus decoys that contain the needle but are no context.
func syntheticMaps(filler int) ([]byte, []Mapping) {
	var b bytes.Buffer
	var want []Mapping
	addr := uint64(0x7f0000000000)
	ctx := 0
	for i := 0; i < filler; i++ {
		name := fmt.Sprintf("/usr/lib/x86_64-linux-gnu/libfiller%d.so", i)
		switch i % 97 {
		case 13:
			name = "/tmp/OTEL_CTX.log" // needle, but not a context: rejected by accept
		case 50:
			name = ""
		}
		fmt.Fprintln(&b, mapsLine(addr, addr+0x1000, "r--p", 0, uint64(i), name))
		addr += 0x1000
		if i%(max(filler/len(contextNames), 1)) == 7 && ctx < len(contextNames) {
			m := Mapping{Start: addr, End: addr + 0x10000, Perms: "rw-p", Name: contextNames[ctx]}
			fmt.Fprintln(&b, mapsLine(m.Start, m.End, m.Perms, 0, 99, m.Name))
			want = append(want, m)
			addr += 0x10000
			ctx++
		}
	}
	return b.Bytes(), want
}

func TestScanFindsAllContextNames(t *testing.T) {
	data, want := syntheticMaps(5000) // ~500 KiB: many 64 KiB chunks
	if len(data) < 4*chunk || len(want) != 4 {
		t.Fatalf("fixture: %d bytes, %d contexts", len(data), len(want))
	}
	readers := map[string]func() io.Reader{
		"file-like":   func() io.Reader { return bytes.NewReader(data) },
		"one byte":    func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) },
		"half":        func() io.Reader { return iotest.HalfReader(bytes.NewReader(data)) },
		"7 bytes":     func() io.Reader { return &chunkReader{bytes.NewReader(data), 7} },
		"4095 bytes":  func() io.Reader { return &chunkReader{bytes.NewReader(data), 4095} },
		"data+EOF":    func() io.Reader { return iotest.DataErrReader(bytes.NewReader(data)) },
		"data+EOF 13": func() io.Reader { return iotest.DataErrReader(&chunkReader{bytes.NewReader(data), 13}) },
	}
	for name, r := range readers {
		got, err := scan(r(), []byte("OTEL_CTX"), isContextName)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: got %+v, want %+v", name, got, want)
		}
	}
	// Without accept, the decoys are returned too, exactly as a line-by-line parse finds them.
	ref, _ := reference(data, "OTEL_CTX", nil)
	got, err := scan(bytes.NewReader(data), []byte("OTEL_CTX"), nil)
	if err != nil || !reflect.DeepEqual(got, ref) || len(ref) <= len(want) {
		t.Fatalf("without accept: %d mappings, reference %d, err %v", len(got), len(ref), err)
	}
}

// A context line placed across the 64 KiB read boundary, at every offset
// around it (needle split, newline exactly at the boundary, line starting
// right after it).
func TestScanLineAcrossChunkBoundary(t *testing.T) {
	line := mapsLine(0x7f1c2a000000, 0x7f1c2a010000, "rw-p", 0, 1234, "/memfd:OTEL_CTX (deleted)")
	want := []Mapping{{0x7f1c2a000000, 0x7f1c2a010000, "rw-p", 0, "/memfd:OTEL_CTX (deleted)"}}
	filler := mapsLine(0x1000, 0x2000, "r--p", 0, 1, "/usr/lib/libfiller.so") + "\n"
	for _, boundary := range []int{chunk, 2 * chunk} {
		for delta := -len(line) - 2; delta <= 2; delta++ {
			// Fill up to boundary+delta with filler lines, padding the
			// last filler name so that the context line starts there.
			lineStart := boundary + delta
			var b bytes.Buffer
			for b.Len()+len(filler)*2 < lineStart {
				b.WriteString(filler)
			}
			pad := lineStart - b.Len() - len(filler)
			b.WriteString(strings.TrimSuffix(filler, "\n") + strings.Repeat("x", pad) + "\n")
			if b.Len() != lineStart {
				t.Fatalf("fixture: line at %d, want %d", b.Len(), lineStart)
			}
			b.WriteString(line + "\n")
			b.WriteString(filler)
			got, err := scan(bytes.NewReader(b.Bytes()), []byte("OTEL_CTX"), isContextName)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("line at boundary%+d (%d): got %+v, %v", delta, boundary, got, err)
			}
			// And as the last line of the file, without a newline.
			data := append(b.Bytes()[:lineStart:lineStart], line...)
			got, err = scan(bytes.NewReader(data), []byte("OTEL_CTX"), isContextName)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("last line at boundary%+d (%d), no newline: got %+v, %v", delta, boundary, got, err)
			}
		}
	}
}

func TestScanErrors(t *testing.T) {
	needle := []byte("OTEL_CTX")
	t.Run("read error", func(t *testing.T) {
		boom := errors.New("boom")
		r := io.MultiReader(strings.NewReader("00400000-00401000 r--p 00000000 08:02 1 /bin/x\n"), iotest.ErrReader(boom))
		if _, err := scan(r, needle, nil); !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("malformed matching line", func(t *testing.T) {
		data := "00400000-00401000 r--p 00000000 08:02 1 /bin/x\nnot a maps line OTEL_CTX\n"
		if _, err := scan(strings.NewReader(data), needle, nil); !errors.Is(err, ErrMalformed) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("malformed line without the needle is not parsed", func(t *testing.T) {
		data := "garbage\n" + mapsLine(0x1000, 0x2000, "rw-p", 0, 1, "[anon:OTEL_CTX]") + "\n"
		got, err := scan(strings.NewReader(data), needle, nil)
		if err != nil || len(got) != 1 {
			t.Fatalf("got %+v, %v", got, err)
		}
	})
	t.Run("line longer than a chunk", func(t *testing.T) {
		data := strings.Repeat("x", chunk+10) + "\n"
		if _, err := scan(strings.NewReader(data), needle, nil); !errors.Is(err, ErrMalformed) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		got, err := scan(strings.NewReader(""), needle, nil)
		if err != nil || len(got) != 0 {
			t.Fatalf("got %+v, %v", got, err)
		}
	})
}

func TestFindNamed(t *testing.T) {
	root := t.TempDir()
	data, want := syntheticMaps(300)
	if err := os.MkdirAll(filepath.Join(root, "4242"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "4242", "maps"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := FindNamed(root, 4242, "OTEL_CTX", isContextName)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("FindNamed = %+v, %v; want %+v", got, err, want)
	}
	if _, err := FindNamed(root, 4243, "OTEL_CTX", nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing pid: %v", err)
	}
	// The real thing: this process has exactly one [vdso] (or none, on
	// kernels without one) and no context.
	if got, err := FindNamed("/proc", os.Getpid(), "OTEL_CTX", nil); err != nil || len(got) != 0 {
		t.Fatalf("own maps: %+v, %v", got, err)
	}
	stack, err := FindNamed("/proc", os.Getpid(), "[stack]", nil)
	if err != nil || len(stack) != 1 || stack[0].Name != "[stack]" || stack[0].Perms[:2] != "rw" {
		t.Fatalf("own [stack]: %+v, %v", stack, err)
	}
}

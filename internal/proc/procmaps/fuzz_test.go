// SPDX-License-Identifier: Apache-2.0

package procmaps

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/fuzzcorpus"
)

func FuzzParseLine(f *testing.F) {
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := ParseLine(line)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if m.End < m.Start || len(m.Perms) != 4 || m.Size() != m.End-m.Start {
			t.Fatalf("accepted %+v", m)
		}
		if len(m.Name) > len(line) || !bytes.Contains(line, []byte(m.Name)) {
			t.Fatalf("name %q is not from the line", m.Name)
		}
		// What was parsed renders back to a line that parses the same.
		again, err := ParseLine([]byte(fmt.Sprintf("%x-%x %s %x 00:00 0 %s", m.Start, m.End, m.Perms, m.Offset, m.Name)))
		if err != nil || again != m {
			t.Fatalf("round trip of %+v: %+v, %v", m, again, err)
		}
	})
}

// FuzzScan compares the chunked scanner with a line-by-line reference, with
// reads of every size.
func FuzzScan(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, readSize uint16) {
		if len(data) > 16<<10 {
			// One-byte reads of a long line cost O(n²) (the incomplete
			// line is searched for '\n' again on every read): keep the
			// fuzzer fast. /proc/PID/maps returns whole lines per read.
			return
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			if len(line) >= chunk {
				return // refused by design
			}
		}
		r := &chunkReader{bytes.NewReader(data), int(readSize%512) + 1}
		got, err := scan(r, []byte("OTEL_CTX"), nil)
		want, werr := reference(data, "OTEL_CTX", nil)
		if (err != nil) != (werr != nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("scan = %+v, %v; reference %+v, %v", got, err, want, werr)
		}
	})
}

func seedCorpus() fuzzcorpus.Seeds {
	lines := map[string][]any{}
	for i, n := range contextNames {
		lines[fmt.Sprint("context-", i)] = []any{[]byte(mapsLine(0x7f1c2a000000, 0x7f1c2a010000, "rw-p", 0, 1234, n))}
	}
	lines["library"] = []any{[]byte(mapsLine(0x55d0c7c00000, 0x55d0c7c21000, "r-xp", 0x1a000, 3146412, "/usr/lib/x86_64-linux-gnu/libc.so.6"))}
	lines["spaces-in-name"] = []any{[]byte(mapsLine(0x1000, 0x2000, "r--p", 0, 1, "/tmp/a dir/lib x.so (deleted)"))}
	lines["anonymous"] = []any{[]byte("7ffd2b9f4000-7ffd2b9f6000 rw-p 00000000 00:00 0 ")}
	lines["vsyscall"] = []any{[]byte("ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]")}
	lines["end-before-start"] = []any{[]byte("7f1c2a010000-7f1c2a000000 rw-p 00000000 00:01 1234 /memfd:OTEL_CTX")}
	lines["bad-hex"] = []any{[]byte("7f1c2a00000g-7f1c2a010000 rw-p 00000000 00:01 1234 /memfd:OTEL_CTX")}
	lines["short"] = []any{[]byte("7f1c2a000000-7f1c2a010000 rw-p")}
	lines["empty"] = []any{[]byte("")}

	data, _ := syntheticMaps(40)
	scans := map[string][]any{
		"synthetic-7":   {data, uint16(6)},
		"synthetic-511": {data, uint16(510)},
		"no-newline":    {[]byte("00400000-00401000 r--p 00000000 08:02 1 /bin/x\n7f1c2a000000-7f1c2a010000 rw-p 00000000 00:00 0 [anon:OTEL_CTX]"), uint16(0)},
		"needle-only":   {[]byte("OTEL_CTX\nOTEL_CTX OTEL_CTX\n\n"), uint16(4)},
		"malformed":     {[]byte("00400000-00401000 r--p 00000000 08:02 1 /bin/x\nnot a maps line OTEL_CTX\n"), uint16(9)},
	}
	return map[string]map[string][]any{"FuzzParseLine": lines, "FuzzScan": scans}
}

// TestSeedCorpus keeps testdata/fuzz in step with seedCorpus (rewrite it
// with go test -run TestSeedCorpus -update-corpus).
func TestSeedCorpus(t *testing.T) { fuzzcorpus.Check(t, "./internal/proc/procmaps", seedCorpus()) }

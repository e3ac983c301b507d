// SPDX-License-Identifier: Apache-2.0

package threadctx_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/otelctx/otelctx/internal/testutil/fuzzcorpus"

	"github.com/otelctx/otelctx/internal/format/threadctx"
)

// FuzzParse: any bytes give a record or a sentinel error, never a panic;
// a record holds at most one entry per key, only valid UTF-8, and never
// more value bytes than the input had (3 for an invalid byte: U+FFFD).
func FuzzParse(f *testing.F) {
	f.Add(record(1, 1, -1, entry(0, "/users/:id"), entry(1, "GET")))
	f.Add(record(1, 0, -1, entry(3, "a"), entry(3, "b")))
	f.Add(record(1, 0, 600, entry(0, "x")))
	f.Add(record(0, 0, -1))
	f.Add(record(1, 0, -1, []byte{1, 10, 'a'}))
	f.Add(record(1, 0, -1, entry(0, "ok\xff")))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := threadctx.Parse(b)
		if err != nil {
			return
		}
		seen := map[uint8]bool{}
		total := 0
		for _, a := range r.Attrs {
			if seen[a.KeyIndex] {
				t.Fatalf("key %d twice", a.KeyIndex)
			}
			seen[a.KeyIndex] = true
			total += len(a.Value)
			if !utf8.ValidString(a.Value) {
				t.Fatalf("key %d: invalid UTF-8 %q", a.KeyIndex, a.Value)
			}
		}
		if total > 3*len(b) {
			t.Fatalf("%d value bytes from %d input bytes", total, len(b))
		}
	})
}

// seedCorpus is the committed corpus of FuzzParse (testdata/fuzz).
func seedCorpus() fuzzcorpus.Seeds {
	return fuzzcorpus.Seeds{"FuzzParse": {
		"valid_two_attrs":   {record(1, 1, -1, entry(0, "/users/:id"), entry(1, "GET"))},
		"last_wins":         {record(1, 0, -1, entry(3, "a"), entry(1, "x"), entry(3, "b"))},
		"size_beyond_read":  {record(1, 0, 600, entry(0, "x"))},
		"invalid_flag":      {record(0, 0, -1)},
		"incomplete_entry":  {record(1, 0, -1, entry(0, "ok"), []byte{1, 10, 'a', 'b', 'c'})},
		"no_attrs_zero_ids": {append(make([]byte, 24), 1, 0, 0, 0)},
		"max_entry":         {record(1, 3, -1, entry(7, strings.Repeat("z", 255)))},
		"invalid_utf8":      {record(1, 0, -1, entry(0, "ok\xff\xfe"), entry(1, "GET"), entry(2, "\xc3"))},
	}}
}

// TestSeedCorpus keeps testdata/fuzz in step with seedCorpus (rewrite it
// with go test -run TestSeedCorpus -update-corpus).
func TestSeedCorpus(t *testing.T) {
	fuzzcorpus.Check(t, "./internal/format/threadctx", seedCorpus())
}

package threadctx_test

import (
	"testing"

	"github.com/otelctx/otelctx/internal/scan/threadctx"
)

// FuzzParse: any bytes give a record or a sentinel error, never a panic;
// a record holds at most one entry per key and never more value bytes than
// the input had.
func FuzzParse(f *testing.F) {
	f.Add(record(1, 1, -1, entry(0, "/users/:id"), entry(1, "GET")))
	f.Add(record(1, 0, -1, entry(3, "a"), entry(3, "b")))
	f.Add(record(1, 0, 600, entry(0, "x")))
	f.Add(record(0, 0, -1))
	f.Add(record(1, 0, -1, []byte{1, 10, 'a'}))
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
		}
		if total > len(b) {
			t.Fatalf("%d value bytes from %d input bytes", total, len(b))
		}
	})
}

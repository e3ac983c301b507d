// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"bytes"
	"errors"
	"testing"

	"github.com/otelctx/otelctx/internal/proc/procstat"
)

// FuzzParseStat: any stat line gives fields 2, 9 and 22 or ErrMalformed,
// and agrees with procstat on the start time.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1234 (a) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 567 0 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStat(b)
		if err != nil {
			if !errors.Is(err, procstat.ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if !bytes.Contains(b, st.comm) {
			t.Fatalf("command name %q not in the line", st.comm)
		}
		// procstat splits on any white space, parseStat on spaces only:
		// they agree on lines of spaces.
		if bytes.ContainsAny(b, "\t\n\v\f\r\x85\xa0") {
			return
		}
		if start, err := procstat.ParseStartTicks(b); err == nil && start != st.start {
			t.Fatalf("start %d, procstat %d", st.start, start)
		}
	})
}

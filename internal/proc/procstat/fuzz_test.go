// SPDX-License-Identifier: Apache-2.0

package procstat

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParse: any stat line (the command name is the process's own choice,
// up to 15 bytes of anything) gives the fields or ErrMalformed, and the
// command name is part of the line.
func FuzzParse(f *testing.F) {
	f.Add([]byte("1234 (a) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 567 0 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if x, err := ParseExec(b); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("ParseExec error %v is not ErrMalformed", err)
		} else if st, perr := Parse(b); err == nil && (perr != nil || st.StartTicks != x.StartTicks) {
			t.Fatalf("ParseExec start %d, Parse %d, %v", x.StartTicks, st.StartTicks, perr)
		}
		st, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if !bytes.Contains(b, st.Comm) {
			t.Fatalf("command name %q not in the line", st.Comm)
		}
		if start, err := ParseStartTicks(b); err != nil || start != st.StartTicks {
			t.Fatalf("ParseStartTicks = %d, %v; Parse %d", start, err, st.StartTicks)
		}
	})
}

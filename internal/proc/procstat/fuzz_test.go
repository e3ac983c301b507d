// SPDX-License-Identifier: Apache-2.0

package procstat

import (
	"errors"
	"testing"
)

// FuzzParseStartTicks: any stat line (the command name is the process's
// own choice, up to 15 bytes of anything) gives a start time or
// ErrMalformed.
func FuzzParseStartTicks(f *testing.F) {
	f.Add([]byte("1234 (a) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 567 0 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := ParseStartTicks(b); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v is not ErrMalformed", err)
		}
	})
}

// SPDX-License-Identifier: Apache-2.0

package procstat

import (
	"errors"
	"os"
	"testing"
)

func TestParseStartTicks(t *testing.T) {
	// A command name with spaces and parentheses, as a process can set.
	line := "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 " +
		"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
	if got, err := ParseStartTicks([]byte(line)); err != nil || got != 987654 {
		t.Fatalf("ParseStartTicks = %d, %v; want 987654", got, err)
	}
	for _, bad := range []string{"", "4242 no parenthesis", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x"} {
		if _, err := ParseStartTicks([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseStartTicks(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestStartTicksOfSelf(t *testing.T) {
	got, err := StartTicks("/proc", os.Getpid())
	if err != nil || got == 0 {
		t.Fatalf("StartTicks(self) = %d, %v", got, err)
	}
	if _, err := StartTicks("/proc", -1); err == nil {
		t.Error("StartTicks(-1) succeeded")
	}
}

// SPDX-License-Identifier: Apache-2.0

package procstat

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestParseStartTicks(t *testing.T) {
	// A command name with spaces and parentheses, as a process can set.
	line := "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 " +
		"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
	if got, err := ParseStartTicks([]byte(line)); err != nil || got != 987654 {
		t.Fatalf("ParseStartTicks = %d, %v; want 987654", got, err)
	}
	// What the scanner's 1024-byte read keeps of a long line: field 22 whole.
	cut := strings.Index(line, " 987654 ") + len(" 987654 ")
	if got, err := ParseStartTicks([]byte(line[:cut])); err != nil || got != 987654 {
		t.Fatalf("cut line: %d, %v", got, err)
	}
	if st, err := Parse([]byte(line)); err != nil || string(st.Comm) != "a) b (c)" {
		t.Fatalf("command name %q, %v; want \"a) b (c)\"", st.Comm, err)
	}
	for _, bad := range []string{"", "4242 no parenthesis", "1 (x) S 1 2",
		"1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x",
		"1 (x) S 1 2 3 4 5 x 7 8 9 10 11 12 13 14 15 16 17 18 19",
		"1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99999999999999999999"} {
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

func TestParseFields(t *testing.T) {
	// Fields 9 (flags: a kernel thread's), 14, 15 and 22 of a real layout.
	line := "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 17 4 0 0 20 0 1 0 9 0 0 " +
		"18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 1 0 0 0 0 0\n"
	st, err := Parse([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if string(st.Comm) != "kthreadd" || st.Flags&FlagKthread == 0 || st.UTime != 17 || st.STime != 4 || st.StartTicks != 9 {
		t.Errorf("Parse = {%q %#x %d %d %d}, want {kthreadd PF_KTHREAD 17 4 9}", st.Comm, st.Flags, st.UTime, st.STime, st.StartTicks)
	}
	// Exactly 22 fields, the last with the line's newline.
	if got, err := ParseStartTicks([]byte("1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 77\n")); err != nil || got != 77 {
		t.Errorf("ParseStartTicks(22 fields) = %d, %v; want 77", got, err)
	}
	b := []byte(line)
	if n := testing.AllocsPerRun(100, func() { _, _ = Parse(b) }); n != 0 {
		t.Errorf("Parse allocates %.0f times per line, want 0", n)
	}
}

// TestParseExec: the environment area is fields 50 and 51; a line without
// them (an older kernel) gives a zero area; this process's own is where
// its environment is.
func TestParseExec(t *testing.T) {
	line := "4242 (a b) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 " +
		"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 93824992 93825000 93825100 140720000 140720100 140720200 140720300 0\n"
	x, err := ParseExec([]byte(line))
	if err != nil || x != (Exec{StartTicks: 987654, Env: EnvArea{Start: 140720200, End: 140720300}}) {
		t.Fatalf("ParseExec = %+v, %v", x, err)
	}
	old := "4242 (a) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10\n"
	if x, err := ParseExec([]byte(old)); err != nil || x != (Exec{StartTicks: 987654}) {
		t.Fatalf("short line: %+v, %v", x, err)
	}
	bad := strings.Replace(line, "140720200", "14072x200", 1)
	if _, err := ParseExec([]byte(bad)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad field 50: %v", err)
	}
	self, err := ReadExec("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.Env.Start == 0 || self.Env.End <= self.Env.Start {
		t.Fatalf("own environment area %+v", self.Env)
	}
}

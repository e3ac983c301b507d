// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/proc/remote"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and parentheses, as a process can set;
	// flags 0x208040 has PF_KTHREAD.
	const kthread = "2 (a) b (c)) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 987654 0 0 " +
		"18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 1 0 0 0 0 0\n"
	st, err := parseStat([]byte(kthread))
	if err != nil || st.start != 987654 || !st.kthread || string(st.comm) != "a) b (c)" {
		t.Fatalf("parseStat = %+v (comm %q), %v", st, st.comm, err)
	}
	// What a 1024-byte read keeps of a long line: field 22 is whole.
	cut := strings.Index(kthread, " 987654 ") + len(" 987654 ")
	if st, err := parseStat([]byte(kthread[:cut])); err != nil || st.start != 987654 {
		t.Fatalf("cut line: %+v, %v", st, err)
	}
	for _, bad := range []string{"", "4242 no parenthesis", "1 (x) S 1 2",
		"1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x",
		"1 (x) S 1 2 3 4 5 x 7 8 9 10 11 12 13 14 15 16 17 18 19",
		"1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99999999999999999999"} {
		if _, err := parseStat([]byte(bad)); !errors.Is(err, procstat.ErrMalformed) {
			t.Errorf("parseStat(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

// TestStatReader reads real stat files: this process's start time is the
// one procstat reads, kthreadd (PID 2) is a kernel thread, and a PID that
// does not exist is gone.
func TestStatReader(t *testing.T) {
	r := statReader{root: "/proc"}
	st, err := r.read(os.Getpid())
	want, werr := procstat.StartTicks("/proc", os.Getpid())
	if err != nil || werr != nil || st.start != want || st.kthread || len(st.comm) == 0 {
		t.Fatalf("read(self) = %+v, %v; procstat says %d, %v", st, err, want, werr)
	}
	if st, err := r.read(2); err != nil || !st.kthread || string(st.comm) != "kthreadd" {
		t.Fatalf("read(2) = %+v (comm %q), %v", st, st.comm, err)
	}
	if _, err := r.read(1 << 30); !errors.Is(err, remote.ErrProcessGone) {
		t.Fatalf("read(missing) = %v, want ErrProcessGone", err)
	}
}

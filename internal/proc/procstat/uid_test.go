// SPDX-License-Identifier: Apache-2.0

//go:build linux

package procstat

import (
	"os"
	"testing"
)

func TestRealUID(t *testing.T) {
	if got, want := RealUID("/proc", os.Getpid()), os.Getuid(); got != want {
		t.Errorf("RealUID(self) = %d, want %d", got, want)
	}
	if got := RealUID("/proc", -1); got != -1 {
		t.Errorf("unreadable: %d", got)
	}
	for in, want := range map[string]int{
		"Name:\tx\nUid:\t1000\t1000\t1000\t1000\n": 1000,
		"Name:\tUid:\t7\nUid:\t0\t0\t0\t0\n":       0,
		"Name:\tx\nUid:\t1000":                     -1, // cut off
		"Name:\tx\nUid:\t-1\t0\n":                  -1,
		"Name:\tx\n":                               -1,
	} {
		if got := parseStatusUID([]byte(in)); got != want {
			t.Errorf("%q: %d, want %d", in, got, want)
		}
	}
}

// FuzzParseStatusUID: any status file gives a UID in 0..2^32-1 or -1.
func FuzzParseStatusUID(f *testing.F) {
	f.Add([]byte("Name:\tapp\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t7\nNgid:\t0\nPid:\t7\nPPid:\t1\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if uid := parseStatusUID(b); uid < -1 || uid > 1<<32-1 {
			t.Fatalf("uid %d", uid)
		}
	})
}

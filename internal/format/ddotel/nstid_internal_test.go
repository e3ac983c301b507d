// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddotel

import (
	"errors"
	"testing"
)

func TestParseNSpid(t *testing.T) {
	for _, c := range []struct {
		status string
		want   int
	}{
		{"Name:\tx\nTgid:\t9\nNSpid:\t1234\nNSpgid:\t1\n", 1234},
		{"Name:\tx\nNSpid:\t18796\t57\t2\nNSpgid:\t1\n", 2},
		{"Name:\tx\nNSpid:\t18796\t2", 2},
	} {
		if got, err := parseNSpid([]byte(c.status)); err != nil || got != c.want {
			t.Errorf("%q: %d, %v; want %d", c.status, got, err, c.want)
		}
	}
	for _, bad := range []string{"Name:\tx\nPid:\t3\n", "Name:\tx\nNSpid:\t\n", "Name:\tx\nNSpid:\t12 x\n", "Name:\tx\nNSpid:\t0\n"} {
		if _, err := parseNSpid([]byte(bad)); !errors.Is(err, ErrNoNSTID) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestCollidingNS(t *testing.T) {
	// Listed 100..103, namespace TIDs 1..3 and 9: 1 and 9 share slot 1 of 8;
	// by the listed TIDs (100 and 108 would) nothing would collide.
	ns := map[int]int{100: 1, 101: 2, 102: 3, 103: 9}
	got := CollidingNS([]int{100, 101, 102, 103, 103, 104}, ns, 8)
	if len(got) != 2 || !got[100] || !got[103] {
		t.Fatalf("CollidingNS = %v", got)
	}
	if got := CollidingNS([]int{100, 101}, ns, 0); !got[100] || !got[101] {
		t.Fatalf("capacity 0: %v", got)
	}
}

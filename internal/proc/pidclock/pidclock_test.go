// SPDX-License-Identifier: Apache-2.0

//go:build linux

package pidclock

import (
	"testing"
)

func TestNotReached(t *testing.T) {
	const pidMax = 1000
	at := Reading{Forks: 100, Last: 500, OK: true}
	for _, tc := range []struct {
		pid   int
		forks uint64 // created since
		want  bool
	}{
		{pid: 600, forks: 99, want: true},   // 100 to go
		{pid: 600, forks: 100, want: false}, // could be it
		{pid: 500, forks: 399, want: true},  // round: 1000-500 + 500-300 = 700 to go, less is safe
		{pid: 400, forks: 500, want: true},  // 500 + 100 = 600 to go
		{pid: 400, forks: 600, want: false},
		{pid: 100, forks: 499, want: true}, // a reserved PID: at least 500 to pid_max
		{pid: 100, forks: 500, want: false},
		{pid: 1000, forks: 0, want: false}, // not a PID under pid_max: nothing told
	} {
		now := Reading{Forks: at.Forks + tc.forks, Last: 0, OK: true}
		if got := at.NotReached(now, tc.pid, pidMax); got != tc.want {
			t.Errorf("pid %d after %d tasks: NotReached %v, want %v", tc.pid, tc.forks, got, tc.want)
		}
	}
	if at.NotReached(Reading{}, 600, pidMax) || (Reading{}).NotReached(at, 600, pidMax) {
		t.Error("a failed reading tells nothing")
	}
	if !at.WithinCycle(Reading{Forks: 100 + 699, OK: true}, pidMax) || at.WithinCycle(Reading{Forks: 100 + 700, OK: true}, pidMax) {
		t.Error("WithinCycle: a full round is pid_max - 300 tasks")
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"testing"

	"github.com/otelctx/otelctx/internal/publisher"
)

// TestPtraceShare: one user (nobody) has 100 processes to snapshot, another
// (root) 2, and a round holds 10: every round snapshots both of root's
// first (users take turns), nobody's take the rest of the round, and each
// of nobody's is snapshotted once every 20 rounds (the rotation), the
// deferred ones counted.
func TestPtraceShare(t *testing.T) {
	const nobody, root = 65534, 0
	var procs []*publisher.Process
	for i := range 100 {
		procs = append(procs, &publisher.Process{ID: publisher.ProcessID{PID: 1000 + i}, UID: nobody, Owner: nobody})
	}
	procs = append(procs, &publisher.Process{ID: publisher.ProcessID{PID: 5000}, UID: root, Owner: root}, &publisher.Process{ID: publisher.ProcessID{PID: 5001}, UID: root, Owner: root})
	s := newPtraceShare()
	s.roundMax, s.floor = 10, 1
	seen := map[int]int{}
	for round := range 20 {
		order, deferred := s.plan(procs)
		if len(order) != 7 || deferred != 95 {
			t.Fatalf("round %d: %d snapshots, %d deferred; want 7 (5 of nobody's, 2 of root's) and 95", round, len(order), deferred)
		}
		rootAt := []int{}
		for i, p := range order {
			seen[p.ID.PID]++
			if p.UID == root {
				rootAt = append(rootAt, i)
			}
		}
		if len(rootAt) != 2 || rootAt[1] > 3 {
			t.Fatalf("round %d: root's processes at %v of %d, want both among the first 4", round, rootAt, len(order))
		}
	}
	for _, p := range procs {
		want := 1
		if p.UID == root {
			want = 20
		}
		if seen[p.ID.PID] != want {
			t.Fatalf("pid %d (uid %d): snapshotted %d times in 20 rounds, want %d", p.ID.PID, p.UID, seen[p.ID.PID], want)
		}
	}
}

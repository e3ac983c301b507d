// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"slices"

	"github.com/otelctx/otelctx/internal/publisher"
)

// The ptrace reader's work per round is shared per user (the process's real
// UID): each UID snapshots at most max(ptraceUserFloor,
// ptraceRoundProcesses / users) of its processes per round, users taking
// turns, and its next round goes on where this one stopped. One user's
// thousands of publishers thus lengthen neither another user's wait within a
// round nor the round itself past ptraceRoundProcesses snapshots (each of at
// most ptrace.DefaultMaxThreads threads), and each of its own processes is
// still snapshotted every few rounds.
const (
	ptraceRoundProcesses = 1024
	ptraceUserFloor      = 16
)

// reasonUserShare: processes deferred to a later round because their user
// had its share of the round (thread_read_failures, per process and round).
const reasonUserShare = "user_share"

// ptraceShare is the rotation of each user's processes across rounds.
type ptraceShare struct {
	next map[int]int // per UID: the index its next round starts at
	// roundMax and floor default to ptraceRoundProcesses and ptraceUserFloor
	// (tests set smaller ones).
	roundMax, floor int
}

func newPtraceShare() *ptraceShare {
	return &ptraceShare{next: map[int]int{}, roundMax: ptraceRoundProcesses, floor: ptraceUserFloor}
}

// plan returns the processes to snapshot this round, users taking turns,
// and how many were deferred to a later round.
func (s *ptraceShare) plan(procs []*publisher.Process) (order []*publisher.Process, deferred int) {
	byUID := map[int][]*publisher.Process{}
	for _, p := range procs {
		byUID[p.Owner] = append(byUID[p.Owner], p) // UIDs minted in a user namespace are one user
	}
	uids := make([]int, 0, len(byUID))
	for uid, ps := range byUID {
		uids = append(uids, uid)
		slices.SortFunc(ps, func(a, b *publisher.Process) int { return a.ID.PID - b.ID.PID })
	}
	slices.Sort(uids)
	share := max(s.floor, s.roundMax/max(1, len(uids)))
	taken := make(map[int]int, len(uids))
	most := 0
	for _, uid := range uids {
		n := len(byUID[uid])
		k := min(n, share)
		taken[uid] = k
		deferred += n - k
		most = max(most, k)
		start := s.next[uid] % n
		if k < n {
			s.next[uid] = (start + k) % n
		} else {
			delete(s.next, uid)
		}
		// Rotate so that this round's processes come first.
		byUID[uid] = slices.Concat(byUID[uid][start:], byUID[uid][:start])
	}
	for uid := range s.next {
		if _, ok := byUID[uid]; !ok {
			delete(s.next, uid)
		}
	}
	order = make([]*publisher.Process, 0, len(procs)-deferred)
	for i := range most {
		for _, uid := range uids {
			if i < taken[uid] {
				order = append(order, byUID[uid][i])
			}
		}
	}
	return order, deferred
}

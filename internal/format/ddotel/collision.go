// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddotel

import "errors"

// ErrCollision: a reader cannot tell whose context a shared slot holds.
var ErrCollision = errors.New("dd_otel_ctx: slot shared with another live thread")

// Colliding returns the tids (namespace TIDs, README.md) that share their
// slot with another: a reader cannot tell whose context such a slot holds.
// A zero capacity has no valid slot: every tid is reported.
func Colliding(tids []int, capacity uint32) map[int]bool {
	return colliding(tids, capacity, func(t int) (int, bool) { return t, true })
}

// colliding leaves out tids without a slot TID.
func colliding(tids []int, capacity uint32, slotTID func(int) (int, bool)) map[int]bool {
	out := map[int]bool{}
	if capacity == 0 {
		for _, t := range tids {
			out[t] = true
		}
		return out
	}
	owner := make(map[uint32]int, len(tids))
	for _, t := range tids {
		v, ok := slotTID(t)
		if !ok {
			continue
		}
		i := uint32(uint64(v) % uint64(capacity))
		o, taken := owner[i]
		switch {
		case !taken:
			owner[i] = t
		case o != t:
			out[o], out[t] = true, true
		}
	}
	return out
}

// CollidingNS is Colliding over listed tids whose slots use their ns TIDs;
// tids missing from ns (exited) are left out.
func CollidingNS(tids []int, ns map[int]int, capacity uint32) map[int]bool {
	return colliding(tids, capacity, func(t int) (int, bool) { v, ok := ns[t]; return v, ok })
}

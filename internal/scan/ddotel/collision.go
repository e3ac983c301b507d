package ddotel

// Colliding returns the tids (of one process's live threads, as TIDs of
// the process's own PID namespace: see NSTIDs and CollidingNS for threads
// listed from another namespace) that share their slot, tid % capacity,
// with another tid of the list. Such a slot holds
// whichever of them wrote last, so a reader cannot tell whose context it is:
// none of them may be attributed. Duplicates of one tid are one thread. A
// zero capacity has no valid slot: every tid is reported.
func Colliding(tids []int, capacity uint32) map[int]bool {
	return colliding(tids, capacity, func(t int) (int, bool) { return t, true })
}

// colliding reports the tids whose slot, slotTID(tid) % capacity, another
// tid of the list shares; tids without a slot TID are left out.
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

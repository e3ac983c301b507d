// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadread

// Reasons a thread read from a buffer slot (not stopped) has no record.
const (
	ReasonEmptySlot   = "empty slot"        // the slot is zero: no active context
	ReasonInProgress  = "write in progress" // in_use was 1 at one of the two reads
	ReasonTorn        = "torn"              // the slot changed between the two reads
	ReasonCollision   = "collision"         // another live thread maps to the same slot
	ReasonStaleOwner  = "stale owner"       // the slot still holds an exited thread's value
	ReasonNotInBuffer = "not in buffer"     // the slot could not be read
)

// Merge prefers an OTEP 4947 record (read stopped, with flags and attributes),
// then a DD one; without either, a read failure before "no context", so a
// caller keeps what it knew. Threads are in otep's order, then dd-only ones.
func Merge(otep, dd []Thread) []Thread {
	if len(dd) == 0 {
		return otep
	}
	if len(otep) == 0 {
		return dd
	}
	byTID := make(map[int]int, len(dd))
	for i, th := range dd {
		byTID[th.TID] = i
	}
	out := make([]Thread, 0, max(len(otep), len(dd)))
	used := make([]bool, len(dd))
	for _, o := range otep {
		i, ok := byTID[o.TID]
		if !ok {
			out = append(out, o)
			continue
		}
		used[i] = true
		d := dd[i]
		switch {
		case o.Record != nil:
			out = append(out, o)
		case d.Record != nil:
			d.ThreadPointer, d.Stopped = o.ThreadPointer, o.Stopped
			out = append(out, d)
		case !NoContext(o.Reason):
			out = append(out, o)
		case !NoContext(d.Reason):
			out = append(out, d)
		default:
			out = append(out, o)
		}
	}
	for i, d := range dd {
		if !used[i] {
			out = append(out, d)
		}
	}
	return out
}

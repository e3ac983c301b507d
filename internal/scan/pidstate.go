// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

// What the scanner knows of a PID is one pidState (Scanner.pids), in one
// of these states; a look moves it on:
//
//	new ──first look──▶ ignored    kernel thread, filtered out, memory unreadable
//	                     candidate  no context nor buffer yet, or refused at a bound
//	                     tracked    a publisher: its pidfd and pagemap, polled
//	candidate ──recheck (backoff, Rescan)──▶ tracked, ignored, or candidate again
//	tracked ──context lost or garbage, evicted──▶ candidate (a Lost event)
//	any ──exit, PID reused, gone from the listing──▶ forgotten
//
// Each state's file holds its data, its looks and its transitions:
// state_candidate.go the looks at an untracked PID (the first one too)
// up to its promotion, state_tracked.go and state_tracked_poll.go a
// publisher's, state_ignored.go the rest.

// pidKind is the state of a PID.
type pidKind uint8

const (
	// stateNamed: only Rescan named the PID; it is looked at as new.
	stateNamed pidKind = iota
	// stateCandidate: looked at, not tracked (state_candidate.go).
	stateCandidate
	// stateIgnored: not looked at again while its process lives
	// (state_ignored.go).
	stateIgnored
	// stateTracked: a publisher (state_tracked.go).
	stateTracked
)

// pidState is one PID's state and the data of that state. Hosts run
// thousands of candidates and ignored processes: keep it small; a tracked
// publisher's kernel objects and reads are behind t.
type pidState struct {
	kind pidKind
	// rescan: Rescan named the PID since the last Scan or Poll (it is in
	// Scanner.rescans once).
	rescan bool
	// start and ino identify the process of a candidate or ignored PID
	// (a tracked one's is t.proc.ID, and its pidfd): its start time, and
	// the inode of its /proc directory (0 until listed), which tells a
	// reused PID at the next listing.
	start, ino uint64
	cand       candidate // stateCandidate
	t          *tracked  // stateTracked
	// refused: the buffer headers counted as refused in the process
	// (candidate or tracked; buffer searches, scanner_buffer.go).
	refused *refusals
}

// is reports whether ps (nil: unknown PID) is in state k.
func (ps *pidState) is(k pidKind) bool { return ps != nil && ps.kind == k }

// entry is pid's state, a new one (stateNamed) if it has none.
func (s *Scanner) entry(pid int) *pidState {
	ps := s.pids[pid]
	if ps == nil {
		ps = &pidState{}
		s.pids[pid] = ps
	}
	return ps
}

// forget drops what is known of pid (its process is gone or another); a
// PID Rescan named stays named until the round ends.
func (s *Scanner) forget(pid int) {
	ps := s.pids[pid]
	if ps == nil {
		return
	}
	if ps.rescan {
		*ps = pidState{rescan: true}
		return
	}
	delete(s.pids, pid)
}

// Rescan makes the next Scan or Poll look at pid's maps again, whatever its
// backoff (used by event-driven discovery).
func (s *Scanner) Rescan(pid int) {
	ps := s.entry(pid)
	if !ps.rescan {
		ps.rescan = true
		s.rescans = append(s.rescans, pid)
	}
}

// endRescans ends a round's Rescan requests.
func (s *Scanner) endRescans() {
	for _, pid := range s.rescans {
		if ps := s.pids[pid]; ps != nil {
			ps.rescan = false
			if ps.kind == stateNamed {
				delete(s.pids, pid)
			}
		}
	}
	s.rescans = s.rescans[:0]
}

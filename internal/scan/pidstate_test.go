// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"slices"
	"testing"
)

func newTestScanner(t *testing.T) *Scanner {
	t.Helper()
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestRescanQueue: a PID Rescan names is queued once however often it is
// named, keeps its flag through forget and a change of state, and a PID
// only named is dropped when the round ends.
func TestRescanQueue(t *testing.T) {
	s := newTestScanner(t)
	s.Rescan(7)
	s.Rescan(7)
	s.Rescan(9)
	if !slices.Equal(s.rescans, []int{7, 9}) {
		t.Fatalf("queue %v, want [7 9]", s.rescans)
	}
	s.pids[9].becomeCandidate(100, 0, candidate{})
	s.forget(9) // PID reused: named still, as new
	if ps := s.pids[9]; !ps.is(stateNamed) || !ps.rescan {
		t.Fatalf("forgotten named PID: %+v", ps)
	}
	s.Rescan(9)
	s.pids[7].becomeCandidate(100, 0, candidate{})
	s.pids[7].ignore(100, 5)
	if !s.pids[7].rescan || len(s.rescans) != 2 {
		t.Fatalf("flag lost in a transition: %+v, queue %v", s.pids[7], s.rescans)
	}
	s.endRescans()
	if len(s.rescans) != 0 || len(s.pids) != 1 || !s.pids[7].is(stateIgnored) || s.pids[7].rescan {
		t.Fatalf("after the round: queue %v, states %v", s.rescans, s.pids)
	}
	s.forget(7)
	if len(s.pids) != 0 {
		t.Fatalf("forgotten PID kept: %v", s.pids)
	}
}

// TestUndefer: taking a publisher out of the deferred polls keeps every
// other one's index right, whichever it is.
func TestUndefer(t *testing.T) {
	s := newTestScanner(t)
	ts := []*tracked{{pid: 1}, {pid: 2}, {pid: 3}, {pid: 4}}
	for _, tr := range ts {
		s.deferred = append(s.deferred, tr)
		tr.deferredAt = len(s.deferred)
	}
	for _, out := range []*tracked{ts[1], ts[3], ts[3], ts[0], ts[2]} {
		s.undefer(out)
		if out.deferredAt != 0 {
			t.Fatalf("pid %d still deferred at %d", out.pid, out.deferredAt)
		}
		for i, tr := range s.deferred {
			if tr.deferredAt != i+1 {
				t.Fatalf("pid %d at %d says %d", tr.pid, i, tr.deferredAt)
			}
		}
	}
	if len(s.deferred) != 0 {
		t.Fatalf("left: %d", len(s.deferred))
	}
}

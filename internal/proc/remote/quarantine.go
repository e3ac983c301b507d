// SPDX-License-Identifier: Apache-2.0

//go:build linux

package remote

import (
	"time"
)

// The quarantine of processes whose reads hung, and the counts that cap
// what hung reads hold (per process, per user, on the host).

type quarantine struct {
	uid     int // the process's user (userOf) when a read of it hung (-1: unknown)
	hung    int
	until   time.Time
	backoff time.Duration
	since   time.Time // the oldest blocked read's start
}

// Stalls returns what the read timeouts have done so far.
func Stalls() StallStats {
	r := reader
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	st := StallStats{Timeouts: r.timeouts, Refused: r.refused, Hung: r.hungTotal}
	for _, q := range r.byPID {
		if q.hung > 0 || now.Before(q.until) {
			st.Quarantined++
		}
		if q.hung > 0 {
			st.OldestHungNs = max(st.OldestHungNs, int64(now.Sub(q.since)))
		}
	}
	return st
}

// released: an abandoned read of pid has returned.
func (r *deadlineReader) released(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hungTotal--
	if q := r.byPID[pid]; q != nil {
		r.userReleased(q.uid)
		q.hung--
		if q.hung == 0 {
			q.since = time.Time{}
		}
	}
}

// timedOut records an abandoned read of pid and quarantines the process.
func (r *deadlineReader) timedOut(pid int, start time.Time, err error) {
	uid := userOf(pid) // its status and namespace, not its memory: cannot hang
	r.mu.Lock()
	r.timeouts++
	r.hungTotal++
	r.prune()
	q := r.byPID[pid]
	if q == nil {
		q = &quarantine{}
		r.byPID[pid] = q
		r.active.Store(int32(len(r.byPID)))
	}
	if q.hung == 0 {
		q.since = start
		q.uid = uid
	}
	q.hung++
	r.userHung(q.uid)
	q.backoff = min(max(2*q.backoff, quarantineMin), quarantineMax)
	q.until = time.Now().Add(q.backoff)
	f := r.onStall
	r.mu.Unlock()
	if f != nil {
		f(pid, err)
	}
}

// userHung and userReleased count a user's blocked reads (under r.mu).
func (r *deadlineReader) userHung(uid int) {
	r.hungByUID[uid]++
	if r.hungByUID[uid] == MaxHungPerUser {
		r.saturated.Add(1)
	}
}

func (r *deadlineReader) userReleased(uid int) {
	if r.hungByUID[uid] == MaxHungPerUser {
		r.saturated.Add(-1)
	}
	if r.hungByUID[uid]--; r.hungByUID[uid] <= 0 {
		delete(r.hungByUID, uid)
	}
}

// succeeded forgets pid's quarantine history after a read that returned.
func (r *deadlineReader) succeeded(pid int) {
	if r.active.Load() == 0 {
		return
	}
	r.mu.Lock()
	if q := r.byPID[pid]; q != nil && q.hung == 0 && !time.Now().Before(q.until) {
		delete(r.byPID, pid)
		r.active.Store(int32(len(r.byPID)))
	}
	r.mu.Unlock()
}

// prune drops entries with nothing blocked whose backoff has long passed
// (a process that went away): the map holds at most the processes that
// timed out in the last quarantineMax.
func (r *deadlineReader) prune() {
	now := time.Now()
	for pid, q := range r.byPID {
		if q.hung == 0 && now.Sub(q.until) > quarantineMax {
			delete(r.byPID, pid)
		}
	}
	r.active.Store(int32(len(r.byPID)))
}

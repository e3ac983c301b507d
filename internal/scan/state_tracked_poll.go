// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/publisher"
)

// The polls of a tracked publisher: every round's (pollTracked, then
// collectExits and applyResults once the exits are known), and those
// PollPIDs makes of the ones a prctl named (pollPaced). A poll's result
// updates the publisher, or moves it to another state (lose, demote).

// pending is a poll result not yet applied: it is only trusted once the
// pidfd check after the read says the process is still the same.
type pending struct {
	pid    int
	stamp  uint64
	err    error
	update *publisher.Process
	errOut error
	// bufErr: the tracked buffer's header check failed (bufferLost
	// tells a header gone or changed from a failure of the check).
	bufErr error
}

// pollTracked reads every tracked publisher (one listed, in a discovery
// round) and keeps in s.pending the results there is something to do
// about: an unchanged publisher with a pidfd costs its read and nothing
// else.
func (s *Scanner) pollTracked(r *round, discover bool, ls listing) {
	clear(s.pending)
	s.pending = s.pending[:0]
	b := s.newRoundBudget(len(s.order))
	for _, t := range s.order {
		if discover && !ls.has(t.pid) {
			continue // gone; loseUnlisted reports it
		}
		if s.quarantinedByBudget(t) {
			r.st.Overran++
			continue // it overran its share lately (roundbudget.go)
		}
		if b.spent() {
			r.st.Postponed++
			continue // the rest waits for the next round
		}
		s.undefer(t) // read now: nothing left to defer
		start := time.Now()
		p, act := s.pollOne(t.pid, t, &r.st)
		if s.chargeRound(&b, t, start, &r.st) {
			continue // its result is dropped with it: it is read again later
		}
		if act {
			s.pending = append(s.pending, p)
		}
	}
}

// pollOne reads one tracked publisher: its stamp (8 bytes), its context
// when the stamp moved, and its buffer's header. act says whether the
// result must be applied.
func (s *Scanner) pollOne(pid int, t *tracked, st *Stats) (p pending, act bool) {
	st.Polled++
	p.pid = pid
	// The header's page may be a file's since the last poll: safemem.
	mem := s.memory(t)
	if t.proc.HasContext() {
		p.stamp, p.err = processctx.ReadStamp(mem, t.proc.MappingAddr)
		if p.err == nil && p.stamp != t.proc.Context.PublishedAtNs {
			p.update, p.errOut = s.readContext(mem, t.proc, st)
		}
	}
	if t.proc.Buffer != nil {
		p.bufErr = s.checkBuffer(mem, t.proc.Buffer)
	}
	act = t.pidfd < 0 || p.err != nil || p.update != nil || p.errOut != nil || p.bufErr != nil
	return p, act
}

// pollNamed is PollPIDs for a tracked publisher: its read, the check that
// it is still the process read (its pidfd alone, not the epoll set), and a
// look for a source it lacks. A publisher the round budget quarantined is
// not read (its prctl calls must not buy it the polls its rounds lost), and
// a named poll is charged as a round's is: one that costs more than the
// publisher's share quarantines it (roundbudget.go).
func (s *Scanner) pollNamed(r *round, t *tracked) {
	pid := t.pid
	if s.quarantinedByBudget(t) {
		return // the rounds read it again once its quarantine is over
	}
	b := s.newRoundBudget(len(s.order))
	start := time.Now()
	p, _ := s.pollOne(pid, t, &r.st)
	if s.chargeRound(&b, t, start, &r.st) {
		return // its result is dropped with it, as in a round
	}
	if t.pidfd >= 0 && !alive(t.pidfd) {
		r.add(publisher.Event{Kind: publisher.Lost, Process: t.proc})
		s.forgetTracked(pid)
		return
	}
	s.apply(r, p)
	if ps := s.pids[pid]; ps.is(stateTracked) && ps.t.incomplete() && s.completePaced(ps.t, r.now, true) {
		r.add(s.complete(pid, ps.t, &r.st)...)
	}
}

// pollPaced polls a tracked publisher PollPIDs named, at most once per
// MinRescanInterval: any process can call prctl and move its stamp in a
// loop, and each poll of a moved stamp is a full read, decode and event.
// A poll within the interval is deferred to its end, not dropped, so the
// last change is read (NextDeferred says when).
func (s *Scanner) pollPaced(r *round, t *tracked) {
	if !t.lastNamed.IsZero() && r.now.Sub(t.lastNamed) < s.opt.MinRescanInterval {
		if t.deferredAt == 0 {
			s.deferred = append(s.deferred, t)
			t.deferredAt = len(s.deferred)
		}
		return
	}
	t.lastNamed = r.now
	s.undefer(t)
	s.pollNamed(r, t)
}

// undefer takes t out of the deferred polls, if there.
func (s *Scanner) undefer(t *tracked) {
	i := t.deferredAt - 1
	if i < 0 {
		return
	}
	last := len(s.deferred) - 1
	s.deferred[i] = s.deferred[last]
	s.deferred[i].deferredAt = i + 1
	s.deferred[last] = nil
	s.deferred = s.deferred[:last]
	t.deferredAt = 0
}

// deferredDue is the PIDs of the deferred polls due at now.
func (s *Scanner) deferredDue(now time.Time, due []int) []int {
	for _, t := range s.deferred {
		if !now.Before(t.lastNamed.Add(s.opt.MinRescanInterval)) {
			due = append(due, t.pid)
		}
	}
	return due
}

// NextDeferred is when the earliest deferred poll (see PollPIDs) is due:
// a PollPIDs from then on makes it, whatever PIDs it names.
func (s *Scanner) NextDeferred() (time.Time, bool) {
	var next time.Time
	for _, t := range s.deferred {
		if at := t.lastNamed.Add(s.opt.MinRescanInterval); next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next, !next.IsZero()
}

// collectExits takes the exits of tracked publishers from the epoll set,
// after the reads: a result from a process that has exited may have come
// from a new process with the same PID, and is dropped with it.
func (s *Scanner) collectExits(r *round) {
	err := s.exits.exited(func(fd, pid int) {
		if ps := s.pids[pid]; ps.is(stateTracked) && ps.t.pidfd == fd {
			r.add(publisher.Event{Kind: publisher.Lost, Process: ps.t.proc})
			s.forgetTracked(pid)
			return
		}
		// Not ours any more: just close it.
		closePidfd(fd)
	})
	if err != nil {
		s.opt.Logger.Debug("epoll_wait failed", zap.Error(err))
	}
}

// loseUnlisted reports the tracked publishers a listing lacks: without a
// pidfd, a missing /proc entry is how an exit shows.
func (s *Scanner) loseUnlisted(r *round, ls listing) {
	for i := len(s.order) - 1; i >= 0; i-- { // forgetTracked takes order[i] out
		if t := s.order[i]; !ls.has(t.pid) {
			r.add(publisher.Event{Kind: publisher.Lost, Process: t.proc})
			s.forgetTracked(t.pid)
		}
	}
}

// applyResults applies the poll results of the processes still tracked.
func (s *Scanner) applyResults(r *round) {
	for _, p := range s.pending {
		s.apply(r, p)
	}
	clear(s.pending)
	s.pending = s.pending[:0]
}

// apply turns one poll result into the tracked state and its events.
func (s *Scanner) apply(r *round, p pending) {
	ps := s.pids[p.pid]
	if !ps.is(stateTracked) {
		return
	}
	t := ps.t
	if t.pidfd < 0 && !s.same(p.pid, t.proc.ID, -1) {
		// No pidfd (e.g. EMFILE): the start time tells a reused PID.
		r.add(publisher.Event{Kind: publisher.Lost, Process: t.proc})
		s.forgetTracked(p.pid)
		return
	}
	if p.bufErr != nil && !s.applyBufferCheck(r, &p, t) {
		return
	}
	switch {
	case errors.Is(p.err, remote.ErrHelper), errors.Is(p.errOut, remote.ErrHelper):
		// The reader helper went away (it is started again): no news of
		// the process, kept as it is and read again next poll.
		r.st.fail(remote.ErrHelper)
	case p.err != nil:
		// The cached address stopped validating: the context was
		// unmapped (or the process is going away), or its page is a
		// file's now (counted: refused). Rediscover now.
		if errors.Is(p.err, safemem.ErrFileBacked) {
			r.st.fail(p.err)
		}
		s.opt.Logger.Debug("cached process context stopped validating",
			zap.Int("pid", p.pid), zap.Error(p.err))
		r.add(s.rediscover(p.pid, t, &r.st)...)
	case p.errOut != nil:
		s.applyBadContext(r, p, t)
	case p.update != nil && sameContent(t.proc, p.update):
		// Only the stamp moved (a publisher rewrote it over the same
		// payload): the new stamp is kept, so the next poll reads 8
		// bytes again, and nothing is announced.
		s.setProc(t, p.update)
	case p.update != nil:
		r.add(publisher.Event{Kind: publisher.Updated, Process: p.update, Previous: t.proc})
		s.setProc(t, p.update)
	}
}

// applyBufferCheck handles a failed header check of a tracked buffer, and
// reports whether the rest of the result is still to apply.
func (s *Scanner) applyBufferCheck(r *round, p *pending, t *tracked) bool {
	if !s.bufferLost(t.proc.Buffer, p.bufErr) {
		// The check failed, not the header (EMFILE, EINTR, ...): counted,
		// the buffer kept, checked again next poll.
		reason := r.st.fail(p.bufErr)
		s.opt.Logger.Debug("thread-context buffer header check failed", zap.Int("pid", p.pid),
			zap.String("schema", t.proc.Buffer.Schema), zap.Stringer("reason", reason), zap.Error(p.bufErr))
		return true
	}
	// The buffer's header stopped validating (unmapped, or overwritten):
	// drop it, search again later (paced).
	r.st.BuffersLost++
	s.opt.Logger.Debug("thread-context buffer stopped validating", zap.Int("pid", p.pid),
		zap.String("schema", t.proc.Buffer.Schema), zap.Error(p.bufErr))
	if errors.Is(p.bufErr, remote.ErrProcessGone) || !t.proc.HasContext() {
		r.add(s.lose(p.pid, t))
		return false
	}
	prev := t.proc
	s.setProc(t, withoutBuffer(prev))
	r.add(publisher.Event{Kind: publisher.Updated, Process: t.proc, Previous: prev})
	if p.update != nil {
		p.update = withoutBuffer(p.update)
	}
	return true
}

// applyBadContext handles a context whose stamp moved and whose read or
// decode then failed.
func (s *Scanner) applyBadContext(r *round, p pending, t *tracked) {
	reason := ReasonOf(p.errOut)
	if reason == ReasonConcurrentUpdate || reason == ReasonPermission {
		return // transient: keep what we have and retry next poll
	}
	if t.proc.Buffer != nil {
		// Garbage now, but the buffer still holds: tracked for the
		// buffer alone, the context looked for again later.
		prev := t.proc
		s.setProc(t, withoutContext(prev))
		r.add(publisher.Event{Kind: publisher.Updated, Process: t.proc, Previous: prev})
		return
	}
	// A publisher that now publishes garbage loses its context; it is
	// looked at again once its stamp moves.
	r.add(publisher.Event{Kind: publisher.Lost, Process: t.proc})
	ps := s.demote(p.pid, 0)
	ps.cand.broken = &brokenCtx{addr: t.proc.MappingAddr, stamp: p.stamp}
}

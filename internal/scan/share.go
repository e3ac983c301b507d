// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/proc/owner"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
)

// DefaultMaxContextMemory bounds the tracked publishers' decoded contexts
// (32 MiB: 500 of the largest, 64 KiB of payload each, or thousands of
// ordinary ones), so that one user forking copies of a large publisher
// cannot take the agent past its memory limit.
const DefaultMaxContextMemory = 32 << 20

// userShare is how many publishers one user may have tracked when users
// users (itself included) have some: MaxProcesses / (users + 1), at least
// one. The "+ 1" keeps room for a user not seen yet, so one user's
// thousands of publishers, started first, never take every slot (alone, a
// user gets half of them). At the bounds a newcomer takes a slot (or
// memory) from the user holding the most (makeRoom).
func userShare(maxProcesses, users int) int {
	return max(1, maxProcesses/(users+1))
}

// share is what one user (publisher.Process.Owner) holds of the bounds.
type share struct{ n, bytes int }

func (sh *share) count() int {
	if sh == nil {
		return 0
	}
	return sh.n
}

func (sh *share) memory() int {
	if sh == nil {
		return 0
	}
	return sh.bytes
}

// contextCost is what p holds of MaxContextMemory (publisher.Process.Cost).
func contextCost(p *publisher.Process) int { return p.Cost() }

// roomFor lets publisher proc of pid in at the bounds, or returns why
// not (counted in r): ErrProcessLimit, ErrUserShare, ErrMemoryShare. At
// a bound another user's publisher may be let go for it (makeRoom).
func (s *Scanner) roomFor(r *round, pid int, proc *publisher.Process) error {
	if !s.slotFor(proc.Owner) {
		r.st.fail(ErrProcessLimit)
		s.opt.Logger.Debug("ignoring process context: tracked process limit reached",
			zap.Int("pid", pid), zap.Int("max_processes", s.opt.MaxProcesses))
		return ErrProcessLimit
	}
	if s.overShare(proc.Owner) {
		r.st.fail(ErrUserShare)
		s.opt.Logger.Debug("ignoring process context: its user's share of tracked processes reached",
			zap.Int("pid", pid), zap.Int("uid", proc.UID), zap.Int("owner", proc.Owner), zap.Int("tracked_by_owner", s.shares[proc.Owner].count()))
		return ErrUserShare
	}
	if err := s.makeRoom(r, proc); err != nil {
		r.st.fail(err)
		s.opt.Logger.Debug("ignoring process context: no room among the tracked publishers",
			zap.Int("pid", pid), zap.Int("owner", proc.Owner), zap.Int("max_processes", s.opt.MaxProcesses),
			zap.Int("context_memory", s.bytes), zap.Int("max_context_memory", s.opt.MaxContextMemory), zap.Error(err))
		return err
	}
	return nil
}

// overShare reports whether owner tracks its share of MaxProcesses already.
func (s *Scanner) overShare(owner int) bool {
	sh, has := s.shares[owner]
	users := len(s.shares)
	if !has {
		users++
	}
	return sh.count() >= userShare(s.opt.MaxProcesses, users)
}

// slotFor reports whether a publisher of owner can be tracked at the
// MaxProcesses bound: there is a free slot, or a user holding more than
// owner would with it lets go of one (makeRoom).
func (s *Scanner) slotFor(owner int) bool {
	if len(s.order) < s.opt.MaxProcesses {
		return true
	}
	v := s.largest(func(sh *share) int { return sh.n })
	return v != owner && s.shares[v].count() > s.shares[owner].count()+1
}

// makeRoom makes room for p among the tracked publishers: at a bound, the
// user holding the most of it lets go of its costliest publisher, as long
// as it holds more than p's user would with p, so that a user's publishers
// tracked first (or minted under many UIDs) never keep another's out and
// no user loses one to a user holding more. It returns ErrProcessLimit or
// ErrMemoryShare when no user holds more.
func (s *Scanner) makeRoom(r *round, p *publisher.Process) error {
	cost := contextCost(p)
	mine := s.shares[p.Owner]
	for {
		switch {
		case len(s.order) >= s.opt.MaxProcesses:
			if !s.slotFor(p.Owner) {
				return ErrProcessLimit
			}
			s.evict(r, s.largest(func(sh *share) int { return sh.n }))
		case s.bytes+cost > s.opt.MaxContextMemory:
			v := s.largest(func(sh *share) int { return sh.bytes })
			if v == p.Owner || s.shares[v].memory() <= mine.memory()+cost {
				return ErrMemoryShare
			}
			s.evict(r, v)
		default:
			return nil
		}
	}
}

// refusedUnread reports whether a publisher pid, refused as ErrMemoryShare
// at its last look, would be again whatever its context costs: the tracked
// contexts are at MaxContextMemory and its owner holds the most of it. Its
// context is then not read again: thousands of one user's refused copies
// cost a look at their status each, not a read and decode of their payload.
func (s *Scanner) refusedUnread(pid int) bool {
	least := minCost()
	if s.bytes+least <= s.opt.MaxContextMemory {
		return false
	}
	o := owner.Of(s.opt.ProcRoot, pid, procstat.RealUID(s.opt.ProcRoot, pid))
	v := s.largest(func(sh *share) int { return sh.bytes })
	return v == o || s.shares[v].memory() <= s.shares[o].memory()+least
}

// minCost is what the smallest publisher costs (makeRoom's cost).
func minCost() int { return (&publisher.Process{}).Cost() }

// shed enforces MaxContextMemory after updates (a tracked context may grow
// when republished): the user holding the most lets go of its costliest.
func (s *Scanner) shed(r *round) {
	for s.bytes > s.opt.MaxContextMemory && len(s.order) > 0 {
		s.evict(r, s.largest(func(sh *share) int { return sh.bytes }))
	}
}

// largest is the user holding the most by of (the lowest owner among equals,
// for a stable choice).
func (s *Scanner) largest(of func(*share) int) int {
	best, bestN := 0, -1
	for o, sh := range s.shares {
		if n := of(sh); n > bestN || (n == bestN && o < best) {
			best, bestN = o, n
		}
	}
	return best
}

// evict lets go of owner's costliest tracked publisher (the latest started
// among equals: long-running ones stay): it is announced Lost and looked at
// again after RecheckMax, when it is refused while its user holds the most.
func (s *Scanner) evict(r *round, owner int) {
	var victim *tracked
	for _, t := range s.order {
		if t.proc.Owner != owner {
			continue
		}
		if victim == nil || contextCost(t.proc) > contextCost(victim.proc) ||
			(contextCost(t.proc) == contextCost(victim.proc) && t.proc.ID.StartTicks > victim.proc.ID.StartTicks) {
			victim = t
		}
	}
	if victim == nil {
		delete(s.shares, owner) // cannot happen: a share counts tracked publishers
		return
	}
	r.st.Evicted++
	s.opt.Logger.Debug("letting go of a tracked publisher for another user's",
		zap.Int("pid", victim.pid), zap.Int("owner", owner), zap.Int("tracked_by_owner", s.shares[owner].count()),
		zap.Int("context_memory_by_owner", s.shares[owner].memory()))
	r.add(publisher.Event{Kind: publisher.Lost, Process: victim.proc})
	ps := s.demote(victim.pid, s.opt.RecheckMax)
	ps.refused = nil
}

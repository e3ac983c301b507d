// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"errors"
	"slices"
	"time"

	"github.com/otelctx/otelctx/internal/proc/pagemap"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/publisher"
)

// tracked is the state of a publisher: what it publishes, and what reads
// it at each poll (state_tracked_poll.go). Its number is bounded
// (Options.MaxProcesses, share.go).
type tracked struct {
	pid   int
	proc  *publisher.Process
	pidfd int
	buf   bufferTrack
	// mem reads the publisher's memory at every poll: its header's address
	// is the publisher's choice, and the publisher may map a file there
	// after it is tracked. pm (its pagemap, nil when it could not be
	// opened) lets a poll check the header page with one pread.
	mem *safemem.Memory
	pm  *pagemap.File
	// lastNamed is the last poll PollPIDs made of it; a later one within
	// MinRescanInterval is deferred (Scanner.deferred) to
	// lastNamed+interval. deferredAt is its index there plus one (0: not
	// deferred).
	lastNamed  time.Time
	deferredAt int
	// overrun: its poll cost a round more than its share lately (nil:
	// never, or forgotten); roundbudget.go.
	overrun *overrun
}

// bufferTrack is a tracked process's buffer search state.
type bufferTrack struct {
	// wanted: the searches the process gets. For a process found through
	// its process context it is decided once, at promotion.
	wanted searchSet
	// nextCheck and backoff pace the looks at a tracked process that lacks
	// a source (as candidates are paced); lastForced rate-limits the looks
	// forced by Rescan (MinRescanInterval).
	nextCheck, lastForced time.Time
	backoff               time.Duration
}

// memory is t's safe reader for one poll, opening its pagemap if not yet
// open (EMFILE leaves it nil: the poll then reads the maps file).
func (s *Scanner) memory(t *tracked) *safemem.Memory {
	if t.mem == nil {
		t.mem = safemem.New(s.opt.ProcRoot, t.pid)
	}
	if t.pm != nil && !t.pm.IsOpen() {
		t.pm = nil // given up after a read timed out (package lockread)
	}
	if t.pm == nil {
		if pm, err := pagemap.Open(s.opt.ProcRoot, t.pid); err == nil {
			t.pm = pm
			t.mem.UsePagemap(pm)
		}
	}
	t.mem.Reset()
	return t.mem
}

// promote makes candidate ps (pid) the tracked publisher proc, with its
// pidfd fd (-1: none) in the epoll set and the buffer searches wanted, and
// announces it Found.
func (s *Scanner) promote(r *round, ps *pidState, pid int, proc *publisher.Process, fd int, wanted searchSet) {
	if fd >= 0 && s.exits.watch(fd, pid) != nil {
		closePidfd(fd)
		fd = -1 // exits then show through the start time
	}
	t := &tracked{proc: proc, pidfd: fd, buf: bufferTrack{wanted: wanted}}
	s.completePaced(t, s.opt.Now(), true) // a missing source is looked for again after RecheckMin
	s.track(ps, pid, t)
	r.add(publisher.Event{Kind: publisher.Found, Process: proc})
}

// track makes ps the state of publisher t; setProc replaces what is known
// of one; untrack lets go of one's kernel objects and indexes (its next
// state is the caller's). They keep the counts of Stats and the shares
// (count).
func (s *Scanner) track(ps *pidState, pid int, t *tracked) {
	t.pid = pid
	s.memory(t) // the poll's reader, opened with the look rather than at the first poll
	ps.kind, ps.cand, ps.t = stateTracked, candidate{}, t
	i, _ := slices.BinarySearchFunc(s.order, pid, func(t *tracked, pid int) int { return t.pid - pid })
	s.order = slices.Insert(s.order, i, t)
	s.count(t.proc, 1)
}

func (s *Scanner) setProc(t *tracked, p *publisher.Process) {
	s.count(t.proc, -1)
	t.proc = p
	s.count(p, 1)
}

func (s *Scanner) untrack(t *tracked) {
	s.count(t.proc, -1)
	closePidfd(t.pidfd) // which takes it out of the epoll set
	_ = t.pm.Close()
	t.pm, t.mem = nil, nil
	s.undefer(t)
	if i, ok := slices.BinarySearchFunc(s.order, t.pid, func(t *tracked, pid int) int { return t.pid - pid }); ok {
		s.order = slices.Delete(s.order, i, i+1)
	}
}

// count adds d (1 or -1) times p to what its user holds (share.go), and
// to the tracked contexts and buffers counted for Stats.
func (s *Scanner) count(p *publisher.Process, d int) {
	sh := s.shares[p.Owner]
	if sh == nil {
		sh = &share{}
		s.shares[p.Owner] = sh
	}
	sh.n += d
	sh.bytes += d * contextCost(p)
	s.bytes += d * contextCost(p)
	if sh.n <= 0 {
		delete(s.shares, p.Owner)
	}
	if p.HasContext() {
		s.nCtx += d
	}
	if p.Buffer != nil {
		s.nBuf += d
	}
}

// forgetTracked lets go of a tracked publisher whose process is gone.
func (s *Scanner) forgetTracked(pid int) {
	if ps := s.pids[pid]; ps.is(stateTracked) {
		s.untrack(ps.t)
		s.forget(pid)
	}
}

// lose forgets a tracked process (gone) or demotes it to the candidates,
// and returns its Lost event.
func (s *Scanner) lose(pid int, t *tracked) publisher.Event {
	ev := publisher.Event{Kind: publisher.Lost, Process: t.proc}
	if !s.same(pid, t.proc.ID, t.pidfd) {
		s.forgetTracked(pid)
	} else {
		s.demote(pid, 0)
	}
	return ev
}

// demote moves a tracked process back to the candidates (its pidfd is
// closed: candidates hold none), looked at again one backoff after
// backoff.
func (s *Scanner) demote(pid int, backoff time.Duration) *pidState {
	ps := s.pids[pid]
	t := ps.t
	s.untrack(t)
	ps.becomeCandidate(t.proc.ID.StartTicks, 0, candidate{byExe: s.scope.byExecutable(t.proc.ExecutableName), backoff: backoff})
	s.backoff(&ps.cand)
	return ps
}

// rediscover re-parses the maps of a tracked publisher whose cached address
// failed: the context may have moved, been dropped, or the process exited.
func (s *Scanner) rediscover(pid int, t *tracked, st *Stats) []publisher.Event {
	proc, err := s.find(pid, t.proc.ID, t.pidfd, t.proc, st, nil)
	if err == nil {
		proc.Buffer = t.proc.Buffer
		if proc.MappingAddr == t.proc.MappingAddr {
			if proc.Context.PublishedAtNs == t.proc.Context.PublishedAtNs {
				return nil
			}
			if sameContent(t.proc, proc) {
				s.setProc(t, proc) // only the stamp moved: nothing to announce
				return nil
			}
		}
		old := t.proc
		s.setProc(t, proc)
		return []publisher.Event{{Kind: publisher.Updated, Process: proc, Previous: old}}
	}
	gone := errors.Is(err, remote.ErrProcessGone) || !s.same(pid, t.proc.ID, t.pidfd)
	if !gone && t.proc.Buffer != nil {
		// The context went, the buffer stays: tracked for it alone.
		prev := t.proc
		s.setProc(t, withoutContext(prev))
		return []publisher.Event{{Kind: publisher.Updated, Process: t.proc, Previous: prev}}
	}
	return []publisher.Event{s.lose(pid, t)}
}

// completeDue looks again for the source a tracked process lacks, paced,
// or at once (rate-limited) when forced.
func (s *Scanner) completeDue(r *round, pid int, t *tracked, force bool) {
	if t.incomplete() && s.completePaced(t, r.now, force) {
		r.add(s.complete(pid, t, &r.st)...)
	}
}

// completePaced reports whether a tracked process's missing source may be
// looked for now, and if so moves its pacing on.
func (s *Scanner) completePaced(t *tracked, now time.Time, force bool) bool {
	if force && now.Sub(t.buf.lastForced) < s.opt.MinRescanInterval {
		force = false // prctl in a loop: at most one forced look per interval
	}
	if !force && now.Before(t.buf.nextCheck) {
		return false
	}
	if force {
		t.buf.lastForced = now
	}
	t.buf.backoff = min(max(t.buf.backoff*2, s.opt.RecheckMin), s.opt.RecheckMax)
	t.buf.nextCheck = now.Add(t.buf.backoff)
	return true
}

// incomplete reports whether a tracked process may still gain a source:
// a process context it does not publish yet, or a buffer it is searched
// for and has not shown.
func (t *tracked) incomplete() bool {
	return !t.proc.HasContext() || (t.buf.wanted != 0 && t.proc.Buffer == nil)
}

// complete looks again for the source a tracked process lacks (paced like
// candidates) and returns the Updated event when one was found.
func (s *Scanner) complete(pid int, t *tracked, st *Stats) []publisher.Event {
	cur := t.proc
	next := cur
	if !cur.HasContext() {
		st.ProcessesScanned++
		if p, err := s.find(pid, cur.ID, t.pidfd, cur, st, nil); err == nil {
			p.Buffer = cur.Buffer
			next = p
		}
	}
	if t.buf.wanted != 0 && next.Buffer == nil {
		if b, err := s.searchBuffer(pid, cur.ID, t.buf.wanted, st); err == nil && s.same(pid, cur.ID, t.pidfd) {
			cp := *next
			cp.Buffer = b
			next = &cp
		}
	}
	if next == cur {
		return nil
	}
	s.setProc(t, next)
	if !t.incomplete() {
		t.buf.backoff = 0
	}
	return []publisher.Event{{Kind: publisher.Updated, Process: next, Previous: cur}}
}

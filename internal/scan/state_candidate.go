// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/pagemap"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/publisher"
)

// The looks at an untracked PID, its way through discovery: lookAt at
// each listing (or Rescan, PollPIDs), probe when it is new or due, admit
// at its first look (ignored, or a candidate), examine (its maps, context
// and buffer), and promote (state_tracked.go) when it publishes and the
// bounds let it in (share.go); else it stays a candidate, looked at again
// with backoff.

// candidate is the state of a process that did not publish when last
// looked at (or was refused at a bound). It holds no kernel object: its
// PID and start time identify it (checked when it is looked at again),
// and the inode of its /proc directory tells a reused PID at the next
// listing. Hosts run thousands of them: keep it small.
type candidate struct {
	nextCheck  int64 // Unix ns on Options.Now
	lastForced int64 // Unix ns: the last look a Rescan forced
	backoff    time.Duration
	byExe      searchSet // the buffer searches its executable's name selects
	// shareRefused: its last look refused it as ErrMemoryShare; while that
	// would happen whatever it costs, it is refused unread (refusedUnread).
	shareRefused bool
	// broken: the context it publishes failed to decode (nil: none).
	broken *brokenCtx
}

// brokenCtx is the context a candidate publishes that failed to decode:
// while its stamp stays, a look at the candidate costs one stamp read.
type brokenCtx struct{ addr, stamp uint64 }

// becomeCandidate makes ps a candidate's, started at start (ino: its
// /proc directory's inode, 0 when not known). The refused buffer headers
// counted stay counted.
func (ps *pidState) becomeCandidate(start, ino uint64, c candidate) {
	ps.kind, ps.start, ps.ino, ps.cand, ps.t = stateCandidate, start, ino, c, nil
}

// lookAt looks at an untracked PID, in state ps (nil: unknown), if it is
// new or due. e.ino is 0 when the PID does not come from a listing
// (Rescan, PollPIDs).
func (s *Scanner) lookAt(r *round, e procEntry, ps *pidState, force bool) {
	if ps == nil {
		s.probe(r, e, nil)
		return
	}
	switch ps.kind {
	case stateIgnored:
		s.lookAtIgnored(r, e, ps)
	case stateCandidate:
		s.recheck(r, e, ps, force)
	default:
		s.probe(r, e, nil)
	}
}

// recheck looks at a candidate again if it is the same process and due
// (its backoff), or forced by Rescan (rate-limited).
func (s *Scanner) recheck(r *round, e procEntry, ps *pidState, force bool) {
	c := &ps.cand
	if e.ino != 0 && e.ino != ps.ino {
		if s.stat.start(e.pid) != ps.start {
			s.forget(e.pid)
			s.probe(r, e, nil) // a new process behind the PID
			return
		}
		ps.ino = e.ino // first seen unlisted, or a new dentry
	}
	now := r.now.UnixNano()
	if !force && now < c.nextCheck {
		return
	}
	if !force && len(s.order) >= s.opt.MaxProcesses {
		// Nothing can be promoted: a recheck would parse the maps and read
		// a context to refuse it again (counted at its first look and at
		// forced ones). Looked at again one backoff after the limit frees.
		c.nextCheck = now + int64(c.backoff)
		return
	}
	// Anyone can call prctl(PR_SET_VMA) in a loop: a forced look at the
	// same process is taken at most this often (its backoff still looks
	// again later).
	if force && time.Duration(now-c.lastForced) < s.opt.MinRescanInterval {
		return
	}
	if force {
		c.lastForced = now
	}
	s.probe(r, e, ps)
}

// probe examines the maps of an untracked process: a new one (ps nil),
// or a candidate due a recheck (ps). The pidfd is opened before the start
// time is read, so every read after it belongs to the process it refers
// to while it stays alive; it is kept only if the process is promoted.
// The outcome is the PID's next state: tracked, ignored (permission),
// candidate (backoff), or forgotten (gone).
func (s *Scanner) probe(r *round, e procEntry, ps *pidState) {
	pid := e.pid
	defer func() { s.admitted = admittedExe{} }() // valid for this look only
	fd, st, err := s.pin(pid)
	if err != nil {
		s.forget(pid)
		return
	}
	if ps != nil && st.StartTicks != ps.start {
		s.forget(pid) // PID reused: the new process is looked at as new
		ps = nil
	}
	if ps == nil {
		if ps = s.admit(pid, st, e.ino); ps == nil {
			closePidfd(fd)
			return
		}
	}
	if e.ino != 0 {
		ps.ino = e.ino
	}
	if s.stillBroken(pid, ps) {
		closePidfd(fd)
		s.backoff(&ps.cand)
		return
	}
	err = s.examine(r, pid, ps, fd)
	if err == nil {
		return // promoted; the pidfd went with it
	}
	closePidfd(fd)
	switch {
	case errors.Is(err, remote.ErrProcessGone):
		s.forget(pid)
	case ReasonOf(err) == ReasonPermission:
		ps.ignore(ps.start, ps.ino)
	default:
		ps.cand.shareRefused = errors.Is(err, ErrMemoryShare)
		s.backoff(&ps.cand)
	}
}

// pin opens a pidfd for pid (-1 when pidfds are unavailable) and reads the
// process's stat after it.
func (s *Scanner) pin(pid int) (int, procstat.Stat, error) {
	fd, err := openPidfd(pid)
	switch {
	case errors.Is(err, unix.ESRCH):
		return -1, procstat.Stat{}, remote.ErrProcessGone
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		// A thread ID that is not its process's (EINVAL, or ENOENT on
		// newer kernels): not a process to read.
		return -1, procstat.Stat{}, fmt.Errorf("pidfd_open: %w", err)
	}
	ps, err := s.stat.read(pid)
	if err == nil && !alive(fd) {
		err = remote.ErrProcessGone
	}
	if err != nil {
		closePidfd(fd)
		return -1, ps, err
	}
	return fd, ps, nil
}

// admit decides at the first look whether a process is ever looked at:
// kernel threads and filtered processes are ignored while they live. It
// returns the new candidate's state, nil when ignored.
func (s *Scanner) admit(pid int, st procstat.Stat, ino uint64) *pidState {
	ps := s.entry(pid)
	if st.Flags&procstat.FlagKthread != 0 {
		ps.ignore(st.StartTicks, ino)
		return nil
	}
	c := candidate{backoff: s.opt.RecheckMin / 2}
	if s.opt.Filter != nil || len(s.scope.executables) > 0 {
		exe, err := os.Readlink(s.opt.ProcRoot + "/" + strconv.Itoa(pid) + "/exe")
		if err != nil || exe == "" {
			exe = string(st.Comm)
		} else {
			s.admitted = admittedExe{id: publisher.ProcessID{PID: pid, StartTicks: st.StartTicks}, path: exe}
		}
		name := filepath.Base(exe)
		if s.opt.Filter != nil && !s.opt.Filter(pid, name) {
			ps.ignore(st.StartTicks, ino)
			return nil
		}
		c.byExe = s.scope.byExecutable(name)
	}
	ps.becomeCandidate(st.StartTicks, ino, c)
	return ps
}

// stillBroken reports whether the candidate still publishes the context
// that failed to decode (its stamp did not move).
func (s *Scanner) stillBroken(pid int, ps *pidState) bool {
	b := ps.cand.broken
	if b == nil {
		return false
	}
	if stamp, err := s.readStampOnce(pid, b.addr); err == nil && stamp == b.stamp {
		return true
	}
	ps.cand.broken = nil
	return false
}

// readStampOnce reads the stamp of a header at addr in an untracked
// process, through safemem (the header's page may be a file's by now):
// one pagemap read when the page is in the page tables.
func (s *Scanner) readStampOnce(pid int, addr uint64) (uint64, error) {
	mem := safemem.New(s.opt.ProcRoot, pid)
	if pm, err := pagemap.Open(s.opt.ProcRoot, pid); err == nil {
		defer pm.Close()
		mem.UsePagemap(pm)
	}
	return processctx.ReadStamp(mem, addr)
}

// examine reads the process context (and searches a thread-context buffer)
// of a candidate, and promotes it when it has one of the two and the
// bounds (share.go) let it in.
func (s *Scanner) examine(r *round, pid int, ps *pidState, fd int) error {
	r.st.ProcessesScanned++
	id := publisher.ProcessID{PID: pid, StartTicks: ps.start}
	if ps.cand.shareRefused && s.refusedUnread(pid) {
		r.st.fail(ErrMemoryShare)
		return ErrMemoryShare
	}
	var libs searchSet
	proc, err := s.find(pid, id, fd, nil, &r.st, &libs)
	wanted := s.scope.searchesFor(ps.cand.byExe, libs)
	if wanted != 0 {
		proc, err = s.withBuffer(pid, id, fd, wanted, proc, err, &r.st)
	}
	if err != nil {
		return err
	}
	if err := s.roomFor(r, pid, proc); err != nil {
		return err
	}
	s.promote(r, ps, pid, proc, fd, wanted)
	return nil
}

// backoff doubles a candidate's recheck interval (within RecheckMin and
// RecheckMax) and sets its next recheck.
func (s *Scanner) backoff(c *candidate) {
	c.backoff = min(max(c.backoff*2, s.opt.RecheckMin), s.opt.RecheckMax)
	c.nextCheck = s.opt.Now().Add(c.backoff).UnixNano()
}

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

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/pagemap"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/publisher"
)

// candidate is a process that did not publish when last looked at. It
// holds no kernel object: its PID and start time identify it (checked
// when it is looked at again), and the inode of its /proc directory tells
// a reused PID at the next listing. Hosts run thousands of them: keep it
// small.
type candidate struct {
	start      uint64
	ino        uint64
	nextCheck  int64 // Unix ns on Options.Now
	lastForced int64 // Unix ns: the last look a Rescan forced
	backoff    time.Duration
	byExe      searchSet // the buffer searches its executable's name selects
	// shareRefused: its last look refused it as ErrMemoryShare; while that
	// would happen whatever it costs, it is refused unread (refusedUnread).
	shareRefused bool
}

// ignoredProc is a process not looked at again while it lives: a kernel
// thread, one the filter excludes, or one whose memory may not be read
// (denied now is denied for the process's life: the same credentials, the
// same policy).
type ignoredProc struct{ start, ino uint64 }

// brokenCtx is the context a candidate publishes that failed to decode:
// while its stamp stays, a look at the candidate costs one stamp read.
type brokenCtx struct{ start, addr, stamp uint64 }

// discover looks at the listed processes that are new, due a recheck, or
// forced by Rescan, and forgets the candidates the listing lacks.
func (s *Scanner) discover(r *round, ls listing) {
	for _, e := range ls {
		if s.stopping.Load() {
			return // Interrupt: nobody else is looked at
		}
		_, force := s.forced[e.pid]
		if t, ok := s.tracked[e.pid]; ok {
			s.completeDue(r, e.pid, t, force)
			continue
		}
		s.lookAt(r, e, force)
	}
	for pid := range s.others {
		if !ls.has(pid) {
			s.forgetOther(pid)
		}
	}
	for pid := range s.ignored {
		if !ls.has(pid) {
			delete(s.ignored, pid)
		}
	}
}

// lookForced is a poll round's discovery: the PIDs passed to Rescan only.
func (s *Scanner) lookForced(r *round) {
	for pid := range s.forced {
		if s.stopping.Load() {
			return
		}
		if t, ok := s.tracked[pid]; ok {
			s.completeDue(r, pid, t, true)
			continue
		}
		s.lookAt(r, procEntry{pid: pid}, true)
	}
}

// completeDue looks again for the source a tracked process lacks, paced,
// or at once (rate-limited) when forced.
func (s *Scanner) completeDue(r *round, pid int, t *tracked, force bool) {
	if t.incomplete() && s.completePaced(t, r.now, force) {
		r.add(s.complete(pid, t, &r.st)...)
	}
}

// lookAt looks at an untracked process if it is new or due. e.ino is 0
// when the PID does not come from a listing (Rescan, PollPIDs).
func (s *Scanner) lookAt(r *round, e procEntry, force bool) {
	if ig, ok := s.ignored[e.pid]; ok {
		if e.ino != 0 && e.ino == ig.ino {
			return // listed with the same inode: the same process
		}
		if s.stat.start(e.pid) == ig.start {
			if e.ino != 0 {
				ig.ino = e.ino // the same process, a new dentry
				s.ignored[e.pid] = ig
			}
			return
		}
		delete(s.ignored, e.pid)
		s.probe(r, e, nil) // a new process behind the PID
		return
	}
	c, known := s.others[e.pid]
	if !known {
		s.probe(r, e, nil)
		return
	}
	if e.ino != 0 && e.ino != c.ino {
		if s.stat.start(e.pid) != c.start {
			s.forgetOther(e.pid)
			s.probe(r, e, nil) // a new process behind the PID
			return
		}
		c.ino = e.ino // first seen unlisted, or a new dentry
		s.others[e.pid] = c
	}
	now := r.now.UnixNano()
	if !force && now < c.nextCheck {
		return
	}
	if !force && len(s.tracked) >= s.opt.MaxProcesses {
		// Nothing can be promoted: a recheck would parse the maps and read
		// a context to refuse it again (counted at its first look and at
		// forced ones). Looked at again one backoff after the limit frees.
		c.nextCheck = now + int64(c.backoff)
		s.others[e.pid] = c
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
	s.probe(r, e, &c)
}

// probe examines the maps of an untracked process; c is what is known of
// it (nil: a first look). The pidfd is opened before the start time is
// read, so every read after it belongs to the process it refers to while
// it stays alive; it is kept only if the process is promoted.
func (s *Scanner) probe(r *round, e procEntry, c *candidate) {
	pid := e.pid
	defer func() { s.admitted = admittedExe{} }() // valid for this look only
	fd, ps, err := s.pin(pid)
	if err != nil {
		s.forgetOther(pid)
		return
	}
	if c != nil && ps.StartTicks != c.start {
		s.forgetOther(pid) // PID reused: the new process is looked at as new
		c = nil
	}
	if c == nil {
		nc, ok := s.admit(pid, ps, e.ino)
		if !ok {
			closePidfd(fd)
			return
		}
		c = &nc
	}
	if e.ino != 0 {
		c.ino = e.ino
	}
	if s.stillBroken(pid, c.start) {
		closePidfd(fd)
		s.backoff(c)
		s.others[pid] = *c
		return
	}
	err = s.examine(r, pid, c, fd)
	if err == nil {
		return // promoted; the pidfd went with it
	}
	closePidfd(fd)
	switch {
	case errors.Is(err, remote.ErrProcessGone):
		s.forgetOther(pid)
	case ReasonOf(err) == ReasonPermission:
		s.ignore(pid, ignoredProc{start: c.start, ino: c.ino})
	default:
		c.shareRefused = errors.Is(err, ErrMemoryShare)
		s.backoff(c)
		s.others[pid] = *c
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
// kernel threads and filtered processes are ignored while they live.
func (s *Scanner) admit(pid int, ps procstat.Stat, ino uint64) (candidate, bool) {
	c := candidate{start: ps.StartTicks, ino: ino, backoff: s.opt.RecheckMin / 2}
	if ps.Flags&procstat.FlagKthread != 0 {
		s.ignore(pid, ignoredProc{start: ps.StartTicks, ino: ino})
		return c, false
	}
	if s.opt.Filter == nil && len(s.scope.executables) == 0 {
		return c, true // the executable is not needed
	}
	exe, err := os.Readlink(s.opt.ProcRoot + "/" + strconv.Itoa(pid) + "/exe")
	if err != nil || exe == "" {
		exe = string(ps.Comm)
	} else {
		s.admitted = admittedExe{id: publisher.ProcessID{PID: pid, StartTicks: ps.StartTicks}, path: exe}
	}
	name := filepath.Base(exe)
	if s.opt.Filter != nil && !s.opt.Filter(pid, name) {
		s.ignore(pid, ignoredProc{start: ps.StartTicks, ino: ino})
		return c, false
	}
	c.byExe = s.scope.byExecutable(name)
	return c, true
}

// stillBroken reports whether the process still publishes the context
// that failed to decode (its stamp did not move).
func (s *Scanner) stillBroken(pid int, start uint64) bool {
	b, ok := s.broken[pid]
	if !ok {
		return false
	}
	if b.start == start {
		if stamp, err := s.readStampOnce(pid, b.addr); err == nil && stamp == b.stamp {
			return true
		}
	}
	delete(s.broken, pid)
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
// of a candidate, and promotes it when it has one of the two.
func (s *Scanner) examine(r *round, pid int, c *candidate, fd int) error {
	r.st.ProcessesScanned++
	id := publisher.ProcessID{PID: pid, StartTicks: c.start}
	if c.shareRefused && s.refusedUnread(pid) {
		r.st.fail(ErrMemoryShare)
		return ErrMemoryShare
	}
	var libs searchSet
	proc, err := s.find(pid, id, fd, nil, &r.st, &libs)
	wanted := s.searchesFor(c.byExe, libs)
	if wanted != 0 {
		proc, err = s.withBuffer(pid, id, fd, wanted, proc, err, &r.st)
	}
	if err != nil {
		return err
	}
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
	if fd >= 0 && s.exits.watch(fd) != nil {
		closePidfd(fd)
		fd = -1 // exits then show through the start time
	}
	delete(s.others, pid)
	delete(s.broken, pid)
	t := &tracked{proc: proc, pidfd: fd, buf: bufferTrack{wanted: wanted}}
	s.completePaced(t, s.opt.Now(), true) // a missing source is looked for again after RecheckMin
	s.track(pid, t)
	r.add(publisher.Event{Kind: publisher.Found, Process: proc})
	return nil
}

func (s *Scanner) backoff(c *candidate) {
	c.backoff = min(max(c.backoff*2, s.opt.RecheckMin), s.opt.RecheckMax)
	c.nextCheck = s.opt.Now().Add(c.backoff).UnixNano()
}

func (s *Scanner) ignore(pid int, ig ignoredProc) {
	s.forgetOther(pid)
	s.ignored[pid] = ig
}

func (s *Scanner) forgetOther(pid int) {
	delete(s.refused, pid)
	delete(s.others, pid)
	delete(s.broken, pid)
}

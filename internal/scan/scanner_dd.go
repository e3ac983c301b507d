// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
)

// DDMode says which processes the scanner searches for a Datadog
// DD_OTEL_CTX thread-context buffer (ddotel).
type DDMode uint8

// DD modes.
const (
	// DDNone: no process is searched (the zero value).
	DDNone DDMode = iota
	// DDJava: processes that look like a JVM (the Datadog Java profiler is
	// the only known writer): executable named java, or libjvm.so mapped.
	DDJava
	// DDAll: every process. Finding a buffer by its magic reads the start
	// of each private anonymous mapping (and, failing that, resident pages
	// inside them), which is more work per process than the OTEL_CTX name
	// lookup.
	DDAll
)

// jvmLibrary is a JVM's shared library: a process that maps it runs Java,
// whatever its executable is called (a launcher embedding the JVM).
const jvmLibrary = "/libjvm.so"

// ddTrack is a process's DD_OTEL_CTX search state.
type ddTrack struct {
	// wanted: the process is searched (by DDMode). For a process found
	// through its process context it is decided once, at promotion.
	wanted bool
	// nextCheck and backoff pace the looks at a tracked process that lacks
	// a source (as candidates are paced); lastForced rate-limits the looks
	// forced by Rescan (MinRescanInterval).
	nextCheck, lastForced time.Time
	backoff               time.Duration
}

// ddWanted decides whether the process is searched for a buffer: by the
// mode, the executable's name (java: named java), or (DDJava) libjvm.so in
// its maps (jvm, learnt by find in the same pass over the maps file as
// OTEL_CTX).
func (s *Scanner) ddWanted(java, jvm bool) bool {
	switch s.opt.DD {
	case DDAll:
		return true
	case DDJava:
		return jvm || java
	}
	return false
}

// maxRefusedKept bounds the refused header addresses remembered per
// process (8 KiB); a process with more has the others counted at each look.
const maxRefusedKept = 1024

// ddRefusals are the header addresses of one process counted as refused.
type ddRefusals struct {
	id    publisher.ProcessID
	addrs []uint64 // ascending
}

// countRefused remembers the refused header addresses of process id and
// returns how many were not counted before: a refused header is counted
// once per process and address, not at every recheck.
func (s *Scanner) countRefused(id publisher.ProcessID, addrs []uint64) int {
	if len(addrs) == 0 {
		return 0
	}
	r := s.ddRefused[id.PID]
	if r == nil || r.id != id {
		r = &ddRefusals{id: id}
		s.ddRefused[id.PID] = r
	}
	n := 0
	for _, a := range addrs {
		i, seen := slices.BinarySearch(r.addrs, a)
		if seen {
			continue
		}
		n++
		if len(r.addrs) < maxRefusedKept {
			r.addrs = slices.Insert(r.addrs, i, a)
		}
	}
	return n
}

// discoverDD searches pid (process id) for a buffer; the outcome is
// counted in st.
func (s *Scanner) discoverDD(pid int, id publisher.ProcessID, st *Stats) (*publisher.Buffer, error) {
	st.DDSearches++
	b, ds, err := ddscan.Discover(s.opt.ProcRoot, safemem.New(s.opt.ProcRoot, pid))
	st.DDRefused += s.countRefused(id, ds.RefusedAt)
	if err != nil {
		if ds.Refused > 0 {
			s.opt.Logger.Debug("DD_OTEL_CTX buffer refused", zap.Int("pid", pid), zap.Error(err))
		}
		return nil, err
	}
	st.DDFound++
	if ds.Valid > 1 {
		s.opt.Logger.Debug("several DD_OTEL_CTX buffers, using the first", zap.Int("pid", pid),
			zap.Int("valid", ds.Valid), zap.Uint64("addr", b.Addr))
	}
	pb := ddscan.Model(b)
	return &pb, nil
}

// withDD completes the outcome of find (proc, err) with a DD_OTEL_CTX
// search: a process without a (valid) process context but with a buffer
// becomes a Process of its own; one with both carries both.
func (s *Scanner) withDD(pid int, id publisher.ProcessID, pidfd int, proc *publisher.Process, err error, st *Stats) (*publisher.Process, error) {
	if errors.Is(err, remote.ErrProcessGone) || ReasonOf(err) == ReasonPermission {
		return proc, err
	}
	b, derr := s.discoverDD(pid, id, st)
	if derr != nil {
		return proc, err
	}
	// The buffer was read from pid: only trusted if pid is still id.
	if !s.same(pid, id, pidfd) {
		return nil, fmt.Errorf("pid %d exited during the DD_OTEL_CTX search: %w", pid, remote.ErrProcessGone)
	}
	if proc == nil {
		proc = s.newProcess(pid, id, nil)
	} else {
		cp := *proc
		proc = &cp
	}
	proc.Buffer = b
	return proc, nil
}

// ddPaced reports whether a tracked process's missing source may be looked
// for now, and if so moves its pacing on.
func (s *Scanner) ddPaced(t *tracked, now time.Time, force bool) bool {
	if force && now.Sub(t.dd.lastForced) < s.opt.MinRescanInterval {
		force = false // prctl in a loop: at most one forced look per interval
	}
	if !force && now.Before(t.dd.nextCheck) {
		return false
	}
	if force {
		t.dd.lastForced = now
	}
	t.dd.backoff = min(max(t.dd.backoff*2, s.opt.RecheckMin), s.opt.RecheckMax)
	t.dd.nextCheck = now.Add(t.dd.backoff)
	return true
}

// incomplete reports whether a tracked process may still gain a source:
// a process context it does not publish yet, or a buffer it is searched
// for and has not shown.
func (t *tracked) incomplete() bool {
	return !t.proc.HasContext() || (t.dd.wanted && t.proc.Buffer == nil)
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
	if t.dd.wanted && next.Buffer == nil {
		if b, err := s.discoverDD(pid, cur.ID, st); err == nil && s.same(pid, cur.ID, t.pidfd) {
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
		t.dd.backoff = 0
	}
	return []publisher.Event{{Kind: publisher.Updated, Process: next, Previous: cur}}
}

// withoutDD is p without its buffer (it stopped validating).
func withoutDD(p *publisher.Process) *publisher.Process {
	cp := *p
	cp.Buffer = nil
	return &cp
}

// withoutContext is p without its process context (it stopped validating
// or turned to garbage, while the process still has a buffer).
func withoutContext(p *publisher.Process) *publisher.Process {
	cp := *p
	cp.MappingAddr, cp.MappingName = 0, ""
	cp.Context = publisher.Process{}.Context
	cp.DecodeStats = publisher.Process{}.DecodeStats
	return &cp
}

// ddHeaderLost reports whether a failed header check (revalidateDD) says
// the buffer is gone: the process is gone, the header's page or mapping
// went away (not written any more, unmapped, cut short, or a file's page
// now: safemem refuses it), or the header changed. Other failures (EMFILE or EINTR opening or reading pagemap, a
// permission refused for a moment) say nothing about the buffer.
func ddHeaderLost(err error) bool {
	for _, gone := range []error{
		remote.ErrProcessGone, os.ErrNotExist, syscall.ESRCH,
		ddotel.ErrHeaderGone, remote.ErrBadAddress, remote.ErrShortRead, safemem.ErrFileBacked,
		ddotel.ErrShort, ddotel.ErrBadMagic, ddotel.ErrBadVersion, ddotel.ErrBadSlotSize, ddotel.ErrBadCapacity,
	} {
		if errors.Is(err, gone) {
			return true
		}
	}
	return false
}

// revalidateDD re-reads the header of a tracked buffer (16 bytes, on a
// page the process wrote) through mem, the poll's safe reader: the process
// may have mapped a file over it since.
func (s *Scanner) revalidateDD(mem *safemem.Memory, b *publisher.Buffer) error {
	return ddscan.Revalidate(mem, ddscan.Layout(*b))
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/publisher"
)

// BufferSearch finds one schema's thread-context buffer in a process's
// memory (a schema found as a process buffer) and checks, at each poll,
// that a buffer it found is still there. The scanner names no format: it
// decides whom to search from the search's Scope, paces and counts the
// searches, and tracks what they find as publisher.Process.Buffer. A
// search holds no per-process state: the scanner keeps it.
type BufferSearch interface {
	// Schema is the schema's name; the buffers Search finds carry it
	// (publisher.Buffer.Schema), and the scanner checks a tracked buffer
	// with the search of its schema.
	Schema() string
	// Scope says which processes are searched.
	Scope() Scope
	// Search searches the process mem reads (procRoot: the procfs mount,
	// for its maps). Nothing found is an error wrapping ErrNoBuffer; its
	// stats tell the candidate headers it refused.
	Search(procRoot string, mem *safemem.Memory) (publisher.Buffer, SearchStats, error)
	// Check re-reads the header of b, a buffer Search found, through mem,
	// the poll's reader (its page may be a file's by now).
	Check(mem *safemem.Memory, b publisher.Buffer) error
	// Lost reports whether a failed Check says the buffer is gone or
	// changed (dropped, searched for again later), not that the check
	// itself failed (EMFILE, EINTR: counted, the buffer kept).
	Lost(err error) bool
}

// Scope is which processes a BufferSearch searches, from what the scanner
// learns at its first look at a process anyway: the executable's name
// (read once, before the maps) and the files its maps name (in the same
// pass that finds OTEL_CTX). A search states its scope rather than being
// asked per process so that the scanner learns only what some search
// uses: the executable is not read, nor the maps lines matched, for
// nothing. The zero Scope searches no process.
type Scope struct {
	// Every: every process the filters let in (the others are ignored).
	Every bool
	// Executable: processes whose executable is named this.
	Executable string
	// Library: processes with a mapping whose name contains this.
	Library string
}

// ErrNoBuffer: a BufferSearch found no buffer.
var ErrNoBuffer = errors.New("no buffer found")

// SearchStats tell what one BufferSearch.Search refused and found.
type SearchStats struct {
	// Refused counts the candidate headers refused (the format's, but
	// not valid: a version, size or capacity the search does not accept),
	// RefusedAt has their addresses (the scanner counts each once per
	// process).
	Refused   int
	RefusedAt []uint64
	// Valid counts the buffers found; more than one is unexpected, and
	// the first is used.
	Valid int
}

// maxBufferSearches bounds Options.Buffers: a candidate keeps which of them
// its executable's name selects in one byte.
const maxBufferSearches = 8

// searchSet is a set of Options.Buffers, by index.
type searchSet uint8

func (m searchSet) has(i int) bool { return m&(1<<i) != 0 }

// bufferScope is Options.Buffers' scopes as the scanner uses them: the
// searches every process gets, and the executable names and libraries
// that select the others.
type bufferScope struct {
	every       searchSet
	executables []searchExecutable
	libraries   []searchLibrary
}

// searchExecutable and searchLibrary are an executable's name and part of
// a mapping's that select a process for Options.Buffers[search].
type (
	searchExecutable struct {
		search int
		name   string
	}
	searchLibrary struct {
		search int
		name   []byte
	}
)

func newBufferScope(searches []BufferSearch) (bufferScope, error) {
	var bs bufferScope
	if len(searches) > maxBufferSearches {
		return bs, fmt.Errorf("%d buffer searches, at most %d", len(searches), maxBufferSearches)
	}
	for i, b := range searches {
		sc := b.Scope()
		if sc.Every {
			bs.every |= 1 << i
			continue
		}
		if sc.Executable != "" {
			bs.executables = append(bs.executables, searchExecutable{search: i, name: sc.Executable})
		}
		if sc.Library != "" {
			bs.libraries = append(bs.libraries, searchLibrary{search: i, name: []byte(sc.Library)})
		}
	}
	return bs, nil
}

// byExecutable is the set of searches that select a process whose
// executable is named name.
func (bs *bufferScope) byExecutable(name string) searchSet {
	var m searchSet
	for _, e := range bs.executables {
		if e.name == name {
			m |= 1 << e.search
		}
	}
	return m
}

// byLibrary adds to m the searches that select a process with a mapping
// named name (a maps line's path) and m lacks.
func (bs *bufferScope) byLibrary(m searchSet, name []byte) searchSet {
	for _, l := range bs.libraries {
		if !m.has(l.search) && bytes.Contains(name, l.name) {
			m |= 1 << l.search
		}
	}
	return m
}

// searchesFor is the set of searches a process gets: those of every
// process, and those its executable's name (byExe, at its first look) or a
// library in its maps (libs, learnt by find in the same pass as OTEL_CTX)
// select.
func (bs *bufferScope) searchesFor(byExe, libs searchSet) searchSet {
	return bs.every | byExe | libs
}

// maxRefusedKept bounds the refused header addresses remembered per
// process (8 KiB); a process with more has the others counted at each look.
const maxRefusedKept = 1024

// refusals are the header addresses of one process counted as refused,
// whatever the search (a header no two formats would both claim).
type refusals struct {
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
	ps := s.pids[id.PID]
	if ps == nil {
		return len(addrs) // not kept: a PID the scanner knows nothing of
	}
	r := ps.refused
	if r == nil || r.id != id {
		r = &refusals{id: id}
		ps.refused = r
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

// searchBuffer runs the wanted searches over pid (process id), in the order
// of Options.Buffers, until one finds a buffer; the outcomes are counted
// in st.
func (s *Scanner) searchBuffer(pid int, id publisher.ProcessID, wanted searchSet, st *Stats) (*publisher.Buffer, error) {
	err := ErrNoBuffer
	for i, search := range s.opt.Buffers {
		if !wanted.has(i) {
			continue
		}
		st.BufferSearches++
		var (
			b  publisher.Buffer
			ss SearchStats
		)
		b, ss, err = search.Search(s.opt.ProcRoot, safemem.New(s.opt.ProcRoot, pid))
		st.BufferHeadersRefused += s.countRefused(id, ss.RefusedAt)
		if err != nil {
			if ss.Refused > 0 {
				s.opt.Logger.Debug("thread-context buffer refused", zap.Int("pid", pid),
					zap.String("schema", search.Schema()), zap.Error(err))
			}
			continue
		}
		st.BuffersFound++
		if ss.Valid > 1 {
			s.opt.Logger.Debug("several thread-context buffers, using the first", zap.Int("pid", pid),
				zap.String("schema", search.Schema()), zap.Int("valid", ss.Valid), zap.Uint64("addr", b.Addr))
		}
		return &b, nil
	}
	return nil, err
}

// withBuffer completes the outcome of find (proc, err) with the wanted
// buffer searches: a process without a (valid) process context but with a
// buffer becomes a Process of its own; one with both carries both.
func (s *Scanner) withBuffer(pid int, id publisher.ProcessID, pidfd int, wanted searchSet, proc *publisher.Process, err error, st *Stats) (*publisher.Process, error) {
	if errors.Is(err, remote.ErrProcessGone) || ReasonOf(err) == ReasonPermission {
		return proc, err
	}
	b, serr := s.searchBuffer(pid, id, wanted, st)
	if serr != nil {
		return proc, err
	}
	// The buffer was read from pid: only trusted if pid is still id.
	if !s.same(pid, id, pidfd) {
		return nil, fmt.Errorf("pid %d exited during the %s buffer search: %w", pid, b.Schema, remote.ErrProcessGone)
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

// withoutBuffer is p without its buffer (it stopped validating).
func withoutBuffer(p *publisher.Process) *publisher.Process {
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

// searchOf is the search that found b (nil: none of Options.Buffers is of
// its schema).
func (s *Scanner) searchOf(b *publisher.Buffer) BufferSearch {
	for _, search := range s.opt.Buffers {
		if search.Schema() == b.Schema {
			return search
		}
	}
	return nil
}

// checkBuffer re-reads the header of a tracked buffer through mem, the
// poll's safe reader (the process may have mapped a file over it since).
func (s *Scanner) checkBuffer(mem *safemem.Memory, b *publisher.Buffer) error {
	search := s.searchOf(b)
	if search == nil {
		return fmt.Errorf("%w: no search for schema %q", ErrNoBuffer, b.Schema)
	}
	return search.Check(mem, *b)
}

// bufferLost reports whether a failed header check (checkBuffer) says the
// buffer is gone (the search's Lost).
func (s *Scanner) bufferLost(b *publisher.Buffer, err error) bool {
	search := s.searchOf(b)
	return search == nil || search.Lost(err)
}

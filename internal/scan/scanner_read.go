// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/proc/owner"
	"github.com/otelctx/otelctx/internal/proc/procmaps"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/publisher"
)

// readContext runs the full read protocol at the process's cached address
// through mem and decodes the payload into a new Process.
func (s *Scanner) readContext(mem *safemem.Memory, old *publisher.Process, st *Stats) (*publisher.Process, error) {
	p := *old
	ctx, ds, err := s.read(mem, old.ID, old.MappingAddr, st)
	if err != nil {
		return nil, err
	}
	p.Context, p.DecodeStats = ctx, ds
	return &p, nil
}

// read reads through mem: the payload address is the publisher's choice,
// read only where a read cannot block on a file system.
func (s *Scanner) read(mem *safemem.Memory, id publisher.ProcessID, addr uint64, st *Stats) (processctx.Context, processctx.DecodeStats, error) {
	pid := id.PID
	raw, rs, err := processctx.ReadRaw(mem, addr, s.opt.Limits.MaxPayloadSize, s.opt.Attempts, s.buf)
	st.Retries += rs.Retries
	if err != nil {
		r := st.fail(err)
		s.opt.Logger.Debug("process context read failed", zap.Int("pid", pid),
			zap.Uint64("addr", addr), zap.Stringer("reason", r), zap.Error(err))
		return processctx.Context{}, processctx.DecodeStats{}, err
	}
	if cap(raw.Payload) > cap(s.buf) {
		s.buf = raw.Payload[:0]
	}
	ctx, ds, err := processctx.Decode(raw.Payload, s.opt.Limits)
	if err != nil {
		st.fail(err)
		s.opt.Logger.Debug("process context payload rejected", zap.Int("pid", pid), zap.Error(err))
		return processctx.Context{}, ds, err
	}
	st.InvalidUTF8 += ds.InvalidUTF8
	if ds.InvalidUTF8 > 0 {
		s.opt.Logger.Debug("process context strings with invalid UTF-8 replaced", zap.Int("pid", pid), zap.Int("strings", ds.InvalidUTF8))
	}
	if ds.Exceeded() {
		st.LimitsExceeded++
		s.opt.Logger.Debug("process context exceeded limits", zap.Int("pid", pid),
			zap.Int("dropped", ds.DroppedAttributes), zap.Int("truncated", ds.TruncatedValues))
	}
	ctx.PublishedAtNs = raw.PublishedAtNs
	return ctx, ds, nil
}

// find locates and reads the process context of pid. prev, when set, is the
// tracked state whose metadata (executable, creation time) carries over.
// libs, when set, learns the buffer searches a library the process maps
// selects (Scope.Library), from the same read of the maps file.
func (s *Scanner) find(pid int, id publisher.ProcessID, pidfd int, prev *publisher.Process, st *Stats, libs *searchSet) (*publisher.Process, error) {
	wantLibs := libs != nil && len(s.scope.libraries) > 0
	if libs != nil {
		*libs = 0
	}
	// One read of the maps finds the context and loads safemem's view.
	mem := safemem.New(s.opt.ProcRoot, pid)
	var maps []procmaps.Mapping
	var parseErr error
	err := mem.LoadEach(func(l *procmaps.Line) {
		if wantLibs {
			*libs = s.scope.byLibrary(*libs, l.Name)
		}
		// The context is a singleton; a process with many OTEL_CTX mappings
		// is broken or hostile, and each try is a full read of up to 64 KiB.
		if parseErr != nil || len(maps) == maxContextMappings || !bytes.Contains(l.Name, contextName) {
			return
		}
		m, err := procmaps.ParseLine(l.Raw)
		if err != nil {
			parseErr = fmt.Errorf("%s/%d/maps: %w", s.opt.ProcRoot, pid, err)
		} else if isContextMapping(m) {
			maps = append(maps, m)
		}
	})
	if err == nil {
		err = parseErr
	}
	if err != nil {
		if libs != nil {
			*libs = 0
		}
		if errors.Is(err, os.ErrNotExist) || !s.same(pid, id, pidfd) {
			return nil, fmt.Errorf("%w: %w", remote.ErrProcessGone, err)
		}
		err = fmt.Errorf("%w: %w", errMaps, err)
		st.fail(err)
		s.opt.Logger.Debug("reading maps failed", zap.Int("pid", pid), zap.Error(err))
		return nil, err
	}
	if len(maps) == 0 {
		return nil, ErrNoContext
	}
	lastErr := ErrNoContext
	for _, m := range maps {
		ctx, ds, err := s.read(mem, id, m.Start, st)
		if err != nil {
			lastErr = err
			continue
		}
		// Only now, after the reads, is the identity checked: if the
		// process exited, the bytes may belong to a successor.
		if !s.same(pid, id, pidfd) {
			return nil, fmt.Errorf("pid %d exited during read: %w", pid, remote.ErrProcessGone)
		}
		proc := s.newProcess(pid, id, prev)
		proc.MappingAddr, proc.MappingName, proc.Context, proc.DecodeStats = m.Start, m.Name, ctx, ds
		return proc, nil
	}
	return nil, lastErr
}

// newProcess returns a Process for id with its metadata (creation time,
// executable, container and pod), carried over from prev when set.
func (s *Scanner) newProcess(pid int, id publisher.ProcessID, prev *publisher.Process) *publisher.Process {
	proc := &publisher.Process{ID: id}
	if prev != nil {
		proc.CreationTime, proc.ExecutablePath, proc.ExecutableName = prev.CreationTime, prev.ExecutablePath, prev.ExecutableName
		proc.Workload, proc.UID, proc.Owner = prev.Workload, prev.UID, prev.Owner
		return proc
	}
	proc.CreationTime = s.boot.Add(time.Duration(id.StartTicks) * time.Second / userHZ)
	proc.Workload = hostinfo.WorkloadOf(s.opt.ProcRoot, pid)
	proc.UID = procstat.RealUID(s.opt.ProcRoot, pid)
	proc.Owner = owner.Of(s.opt.ProcRoot, pid, proc.UID)
	if a := s.admitted; a.id == id {
		s.admitted = admittedExe{}
		proc.ExecutablePath, proc.ExecutableName = a.path, filepath.Base(a.path)
		return proc
	}
	if exe, err := s.fs.Proc(pid); err == nil {
		if path, err := exe.Executable(); err == nil {
			proc.ExecutablePath = path
			proc.ExecutableName = filepath.Base(path)
		} else if comm, err := exe.Comm(); err == nil {
			proc.ExecutableName = comm
		}
	}
	return proc
}

// same reports whether pid is still the process id: by its pidfd when there
// is one (exact, one poll syscall), else by re-reading its start time.
func (s *Scanner) same(pid int, id publisher.ProcessID, pidfd int) bool {
	if pidfd >= 0 {
		return alive(pidfd)
	}
	st, err := s.stat.read(pid)
	return err == nil && st.StartTicks == id.StartTicks
}

var contextName = []byte("OTEL_CTX")

// isContextMapping accepts the four names under which a process context
// appears in /proc/PID/maps (docs/process-context.md).
func isContextMapping(m procmaps.Mapping) bool {
	switch m.Name {
	case "/memfd:OTEL_CTX (deleted)", "/memfd:OTEL_CTX", "[anon_shmem:OTEL_CTX]", "[anon:OTEL_CTX]":
		return m.Size() >= processctx.HeaderSize && strings.HasPrefix(m.Perms, "r")
	}
	return false
}

// ReadPID reads one process's context now, whatever the scanner tracks (the
// CLI's dump). It returns ErrNoContext, or the reader's error, when the
// process has no valid context.
func (s *Scanner) ReadPID(pid int) (*publisher.Process, error) {
	fd, ps, err := s.pin(pid)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	defer closePidfd(fd)
	if ps.Flags&procstat.FlagKthread != 0 {
		return nil, fmt.Errorf("pid %d is a kernel thread: %w", pid, ErrNoContext)
	}
	var st Stats
	return s.find(pid, publisher.ProcessID{PID: pid, StartTicks: ps.StartTicks}, fd, nil, &st, nil)
}

// sameContent reports whether b publishes what a does (its stamp aside),
// with the same limits' cuts: an Updated event for b would announce nothing
// new.
func sameContent(a, b *publisher.Process) bool {
	return a.HasContext() == b.HasContext() && a.DecodeStats == b.DecodeStats && a.Context.SameContent(b.Context)
}

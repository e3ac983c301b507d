// SPDX-License-Identifier: Apache-2.0

//go:build linux

package envscan

import (
	"errors"
	"os"
	"time"
	"unsafe"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/format/otelenv"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/proc/pidclock"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
)

// userHZ is the unit of /proc/PID/stat's start time.
const userHZ = 100

// Source reads the environments of a /proc tree for the catalog's
// environment source (catalog.EnvReader).
type Source struct {
	procRoot string
	self     int // otelctx's own PID (os.Getpid is a system call)
	reader   *Reader
	boot     time.Time
}

// New is a Source of procRoot (normally "/proc"); its boot time must be
// readable.
func New(procRoot string) (*Source, error) {
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return nil, err
	}
	st, err := fs.Stat()
	if err != nil {
		return nil, err
	}
	return &Source{
		procRoot: procRoot,
		self:     os.Getpid(),
		reader:   NewReader(procRoot, 0, 0, 0),
		boot:     time.Unix(int64(st.BootTime), 0),
	}, nil
}

// Self is otelctx's own PID.
func (s *Source) Self() int { return s.self }

// Holder is the start ticks and environment area of pid's holder now (an
// error: none).
func (s *Source) Holder(pid int) (startTicks uint64, envArea [2]uint64, err error) {
	x, err := procstat.ReadExec(s.procRoot, pid)
	return x.StartTicks, [2]uint64{x.Env.Start, x.Env.End}, err
}

// PIDClock is the PID allocator's position now.
func (s *Source) PIDClock() pidclock.Reading { return readPIDClock(s.procRoot) }

// PIDMax is where the PID allocator wraps (0: unknown).
func (s *Source) PIDMax() int { return readPIDMax(s.procRoot) }

// StartTicksOf is the start ticks of a PID's holder in procRoot, for the
// catalog's check of publishers' PIDs (catalog.CheckHolders).
func StartTicksOf(procRoot string) func(pid int) (uint64, error) {
	return func(pid int) (uint64, error) { return procstat.StartTicks(procRoot, pid) }
}

// Read reads the environment of pid, held by the process started at ticks.
func (s *Source) Read(pid int, ticks uint64) publisher.EnvironmentRead {
	var x otelenv.Extractor
	// Its status and namespace, not its memory: cannot block.
	out := publisher.EnvironmentRead{Owner: Owner(s.procRoot, pid)}
	got, err := s.reader.ReadAs(pid, out.Owner, func(b []byte) { _, _ = x.Write(b) })
	switch {
	case errors.Is(err, ErrTimeout):
		out.Outcome = publisher.EnvironmentTimedOut // x may still be written to: dropped
		return out
	case errors.Is(err, ErrBusy):
		out.Outcome = publisher.EnvironmentRefused
		return out
	case errors.Is(err, ErrTooLarge):
		// The variables past the cap are not seen: what was read stands.
	case err != nil || got != ticks:
		out.Outcome = publisher.EnvironmentFailed
		return out
	}
	// The pidfd is opened after the read and bound to the identity by one
	// more look at the start time (a PID is reused only after its holder
	// exited).
	if s.procRoot != "/proc" {
		// A test's tree: its PIDs are not this host's.
	} else if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		w := &pidfd{fd: fd}
		if again, err := procstat.StartTicks(s.procRoot, pid); err != nil || again != ticks {
			w.Close()
			out.Outcome = publisher.EnvironmentHandedOver
			return out
		}
		out.Exit = w
	}
	r := x.Resource()
	out.Dropped = r.Stats.Dropped()
	if len(r.Attributes) > 0 {
		p := &publisher.Process{
			ID:              publisher.ProcessID{PID: pid, StartTicks: ticks},
			CreationTime:    s.boot.Add(time.Duration(ticks) * time.Second / userHZ),
			UID:             -1,
			Workload:        hostinfo.WorkloadOf(s.procRoot, pid),
			FromEnvironment: true,
		}
		p.Context.Resource.Attributes, p.DecodeStats.DecodedSize = resource(r.Attributes)
		out.Process = p
	}
	return out
}

// resource is the environment's attributes in a process context's form
// (string values), and what they hold in memory.
func resource(env []otelenv.Attribute) (attrs []processctx.Attribute, size int) {
	attrs = make([]processctx.Attribute, len(env))
	size = len(env) * int(unsafe.Sizeof(processctx.Attribute{}))
	for i, a := range env {
		attrs[i] = processctx.Attribute{Key: a.Key, Value: processctx.Value{Kind: processctx.KindStr, Str: a.Value}}
		size += len(a.Key) + len(a.Value)
	}
	return attrs, size
}

// pidfd refers to a process itself: while it has not exited it holds its
// PID, which a poll tells without reading /proc (a stat read costs
// ~100 µs on a loaded host).
type pidfd struct{ fd int }

// Alive polls the pidfd; an exited process's is closed.
func (p *pidfd) Alive() (alive, exited bool) {
	if p.fd < 0 {
		return false, false
	}
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err == nil && n == 0 {
			return true, false
		}
		p.Close()
		return false, err == nil
	}
}

// Close closes the pidfd; it may be called more than once.
func (p *pidfd) Close() {
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package attribution

import (
	"errors"
	"fmt"
	"time"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

var (
	// ErrPIDReused: the PID no longer belongs to the process identity read
	// (it exited; the PID may be another process's now).
	ErrPIDReused = errors.New("the PID is no longer the process read")
	// ErrNothingRead: neither source of a snapshot was read.
	ErrNothingRead = errors.New("no source of the snapshot was read")
)

// Snapshot is what one snapshot of a process read.
type Snapshot struct {
	ID publisher.ProcessID
	// At is when the snapshot was taken (the caller's clock).
	At time.Time
	// OTEP is the ptrace snapshot of the thread variables' records
	// (threadread.Snapshot); OTEPFailed: it was due and could not be taken
	// (OTEP is then nil).
	OTEP       []threadread.Thread
	OTEPFailed bool
	// Slots is the read of a buffer's slots (ddslots.ProcessReader.Read; nil: not read).
	Slots []threadread.Thread
	// ProcRoot is the procfs mount ("" = "/proc").
	ProcRoot string
}

// SnapshotResult is a snapshot's threads and what to record of them.
type SnapshotResult struct {
	// Threads is both sources merged per thread (threadread.Merge: an OTEP
	// 4947 record wins).
	Threads []threadread.Thread
	// Records and Unread are catalog.UpdateThreadsFor's: the records seen,
	// and the threads that were not read this time (they keep what they
	// had). Every other thread is observed without a record.
	Records []*catalog.ThreadRecord
	Unread  []int
}

// FromSnapshot merges a snapshot's sources and decides what it says of
// each thread. It fails with ErrPIDReused unless the PID still belongs to
// s.ID now, after the reads: the catalog learns of an exit only at its
// next poll, and the reads of a successor must not land on s.ID.
func FromSnapshot(s Snapshot) (SnapshotResult, error) {
	if s.OTEPFailed && s.Slots == nil {
		return SnapshotResult{}, ErrNothingRead
	}
	if err := CheckIdentity(s.ProcRoot, s.ID); err != nil {
		return SnapshotResult{}, err
	}
	res := SnapshotResult{Threads: threadread.Merge(s.OTEP, s.Slots)}
	for _, th := range res.Threads {
		switch {
		case th.Record != nil:
			res.Records = append(res.Records, &catalog.ThreadRecord{PID: s.ID.PID, TID: th.TID, SeenAt: s.At,
				Record: *th.Record, Attributes: th.Attributes, Source: th.Source})
		case s.OTEPFailed:
			// A thread without a slot record (every thread is then the
			// slots') may still have its variable's, which could not be
			// read.
			res.Unread = append(res.Unread, th.TID)
		case threadread.NoContext(th.Reason), th.Reason == threadread.ReasonCollision:
			// No context; or a slot shared with another live thread:
			// nothing can be attributed to the thread while it is, so it
			// is observed without a record rather than keeping one.
		default:
			// Not stopped or not read this time: it keeps what it had.
			res.Unread = append(res.Unread, th.TID)
		}
	}
	return res, nil
}

// CheckIdentity fails with ErrPIDReused unless id.PID is held by the
// process that started at id.StartTicks.
func CheckIdentity(procRoot string, id publisher.ProcessID) error {
	if procRoot == "" {
		procRoot = "/proc"
	}
	start, err := procstat.StartTicks(procRoot, id.PID)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPIDReused, err)
	}
	if start != id.StartTicks {
		return fmt.Errorf("%w (it started at tick %d, not %d)", ErrPIDReused, start, id.StartTicks)
	}
	return nil
}

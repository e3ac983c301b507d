// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"time"

	"github.com/otelctx/otelctx/internal/proc/pidclock"
)

// markExited: an entry whose process exited (its pidfd says so) keeps
// answering for data taken by exitedBy (the field's comment says which
// bound); started is the PID's holder's start ticks now when known. It
// returns the entry so marked, if any, and its bound.
func (e *envSource) markExited(ent *envEntry, started uint64, known bool, now int64) (*envEntry, int64) {
	if ent == nil {
		return nil, 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !ent.gone || ent.exitedBy != 0 {
		return nil, 0
	}
	// Read after now: more tasks counted, never fewer (conservative).
	after := e.reader.PIDClock()
	bound := ent.checked
	switch {
	case known && started == ent.id.StartTicks:
		bound = now // a zombie still holds its PID
	case known && started > ent.id.StartTicks && ent.seen.WithinCycle(after, e.pidMax):
		bound = max(bound, min(now, startedAt(started, now))) // the holder now is the only one since
	case !known && ent.seen.NotReached(after, ent.id.PID, e.pidMax):
		bound = now // nobody can have held the PID since
	}
	ent.exitedBy = bound
	return ent, bound
}

// reading is the PID allocator's position, read again when older than
// clockFresh (e.mu held): an older one is still a safe "before".
func (e *envSource) reading() pidclock.Reading {
	now := e.now().UnixNano()
	if !e.clock.OK || now-e.clockAt > int64(clockFresh) || now < e.clockAt {
		e.clock, e.clockAt = e.reader.PIDClock(), now
	}
	return e.clock
}

// clockFresh bounds how often /proc/stat is read (some 30 µs).
const clockFresh = 10 * time.Millisecond

// rememberAbsent: no process held pid at now.
func (e *envSource) rememberAbsent(pid int, now int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.absent) >= maxAbsent {
		clear(e.absent)
	}
	e.absent[pid] = now
}

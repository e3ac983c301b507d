// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/publisher"
)

// Exits of publishers reach the catalog once per round (a Lost event),
// seconds after they happen, and profiles name PIDs seconds after their
// samples. A PID reused in between would give the successor's samples the
// exited publisher's context. So data newer than the last time a live
// publisher was known to hold its PID is checked against /proc/PID/stat:
// the same start time, it still does; another, its successor started then
// and the publisher had exited by then; none, it had exited by now. A Lost
// event is stamped the same way.

// holders checks who holds the PIDs of live publishers (holders.go).
type holders struct {
	// startTicks tells the start ticks of a PID's holder now (an error:
	// none).
	startTicks func(pid int) (uint64, error)
	mu         sync.Mutex
	// heldAt: per PID, when (Unix ns) its live publisher was last seen
	// holding it.
	heldAt map[int]int64
	// exitedBy: per PID, the publisher (by identity) seen exited, and a
	// time by which it had.
	exitedBy map[int]exitBound
}

type exitBound struct {
	id publisher.ProcessID
	at int64
}

// CheckHolders turns the check on, reading a PID holder's start ticks
// with startTicks (discovery's: envscan.StartTicksOf).
func (c *Catalog) CheckHolders(startTicks func(pid int) (uint64, error)) {
	c.holders.Store(&holders{startTicks: startTicks, heldAt: map[int]int64{}, exitedBy: map[int]exitBound{}})
}

// holderAt tells whether data of pid taken up to t (Unix ns) may be live
// publisher p's: false when p had exited by an earlier time, because the
// PID has another holder (started by t) or none. One stat read when t is
// newer than the last check, out of budget; past the budget, p is taken
// as the holder (the message's own samples are what the budget protects).
func (c *Catalog) holderAt(p *publisher.Process, t int64, budget *EnvBudget) bool {
	h := c.holders.Load()
	if h == nil || t == 0 {
		return true
	}
	pid := p.ID.PID
	h.mu.Lock()
	if b, ok := h.exitedBy[pid]; ok && b.id == p.ID {
		h.mu.Unlock()
		return t <= b.at
	}
	if t <= h.heldAt[pid] || !budget.take() {
		h.mu.Unlock()
		return true
	}
	h.mu.Unlock()
	now := c.now().UnixNano()
	ticks, err := h.startTicks(pid)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil && ticks == p.ID.StartTicks {
		h.heldAt[pid] = max(h.heldAt[pid], now) // still its (a zombie's too: the PID is not free yet)
		return true
	}
	at := now
	if err == nil && ticks > p.ID.StartTicks { // a holder older than p is not its successor
		at = min(now, startedAt(ticks, now))
	}
	h.exitedBy[pid] = exitBound{id: p.ID, at: at}
	return t <= at
}

// exitTime is when (Unix ns) publisher id, found lost at now, had exited
// by: the start of its PID's next holder if there is one, else now.
func (c *Catalog) exitTime(id publisher.ProcessID, now int64) int64 {
	h := c.holders.Load()
	if h == nil {
		return now
	}
	h.mu.Lock()
	b, ok := h.exitedBy[id.PID]
	delete(h.exitedBy, id.PID)
	delete(h.heldAt, id.PID)
	h.mu.Unlock()
	if ok && b.id == id {
		return min(now, b.at)
	}
	if ticks, err := h.startTicks(id.PID); err == nil && ticks > id.StartTicks {
		return min(now, startedAt(ticks, now))
	}
	return now
}

// forgetHolder drops what was checked of pid (a new publisher holds it).
func (c *Catalog) forgetHolder(pid int) {
	if h := c.holders.Load(); h != nil {
		h.mu.Lock()
		delete(h.exitedBy, pid)
		delete(h.heldAt, pid)
		h.mu.Unlock()
	}
}

// userHZ is the unit of a process's start ticks.
const userHZ = 100

// startedAt is when (Unix ns, the clock of now) a process started ticks
// after boot: /proc/PID/stat's start time counts CLOCK_BOOTTIME, read
// here to the tick (the boot time /proc/stat gives is in whole seconds).
func startedAt(ticks uint64, now int64) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return now // unknown: no earlier than now can be told
	}
	return now - (ts.Nano() - int64(ticks)*int64(time.Second/userHZ))
}

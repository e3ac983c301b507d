// SPDX-License-Identifier: Apache-2.0

// Package lockread runs the reads of /proc files that take another
// process's mmap lock (its maps, its pagemap, a stat of its map_files)
// with a deadline, as package remote runs process_vm_readv. A process can
// keep that lock from us for as long as it likes: a thread of its own
// faulting on a page of a FUSE file whose server holds the READ keeps the
// lock for reading, a second thread's mmap queues as a writer, and every
// later reader (us) queues behind the writer. The wait is killable only.
//
// So each read runs on its own goroutine and the caller waits at most the
// read timeout (remote.ReadTimeout, the configuration's read_timeout),
// counted from the goroutine's system call (remote.Await). A read past it
// is abandoned: it returns when the kernel lets it, its result is dropped,
// and the process is quarantined: its reads fail at once (ErrQuarantined)
// while the abandoned read lasts and for a backoff after it, doubling with
// each timeout. What abandoned reads hold (one blocked OS thread each) is
// capped per process, per user and on the host, with remote's caps.
package lockread

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrTimeout: the read did not return within the read timeout.
	ErrTimeout = errors.New("read of a /proc file that takes the process's mmap lock timed out (the process holds the lock: a fault of its own on a FUSE page, or a userfaultfd one)")
	// ErrQuarantined: an earlier read of the process hung; it is not read
	// until that read returns and its backoff has passed, or too many
	// reads hang on the host.
	ErrQuarantined = errors.New("process quarantined after a /proc read that hung on its mmap lock")
)

// Caps of what hung reads hold (remote's: MaxHungPerProcess,
// MaxHungPerUser, MaxHungTotal).
const (
	MaxHungPerProcess = 1
	MaxHungPerUser    = 4
	MaxHungTotal      = 32
	quarantineMin     = 10 * time.Second
	quarantineMax     = 10 * time.Minute
)

// Stats is what the deadlines have done so far.
type Stats struct {
	Timeouts    uint64 // reads abandoned after the timeout, since start
	Refused     uint64 // reads refused: process quarantined, or a cap reached
	Hung        int    // reads abandoned and still blocked now
	Quarantined int    // processes not read now
}

type quarantine struct {
	uid     int
	hung    int
	until   time.Time
	backoff time.Duration
}

type gate struct {
	active    atomic.Int32 // len(byPID): 0 lets a read skip the lock
	saturated atomic.Int32 // users at MaxHungPerUser: 0 lets a read skip its UID

	mu        sync.Mutex
	byPID     map[int]*quarantine
	hungTotal int
	hungByUID map[int]int
	timeouts  uint64
	refused   uint64
	onStall   func(pid int, err error)
}

var g = &gate{byPID: map[int]*quarantine{}, hungByUID: map[int]int{}}

// OnStall has f called when a process is quarantined after a read of it
// timed out, so that the program can log it once; nil stops the calls.
func OnStall(f func(pid int, err error)) {
	g.mu.Lock()
	g.onStall = f
	g.mu.Unlock()
}

// Stalls returns what the deadlines have done so far.
func Stalls() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	st := Stats{Timeouts: g.timeouts, Refused: g.refused, Hung: g.hungTotal}
	for _, q := range g.byPID {
		if q.hung > 0 || now.Before(q.until) {
			st.Quarantined++
		}
	}
	return st
}

// Quarantined reports whether a read of pid would be refused now.
func Quarantined(pid int) bool {
	if g.active.Load() == 0 {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.byPID[pid]
	return q != nil && (q.hung >= MaxHungPerProcess || time.Now().Before(q.until))
}

// admit refuses a read of a quarantined process, or one past a cap.
func (g *gate) admit(pid int) error {
	uid := -2 // not looked up: no user is at its cap
	if g.saturated.Load() != 0 {
		uid = realUID(pid)
	}
	if g.active.Load() == 0 && uid == -2 {
		g.mu.Lock()
		total := g.hungTotal
		if total < MaxHungTotal {
			g.mu.Unlock()
			return nil
		}
		g.refused++
		g.mu.Unlock()
		return fmt.Errorf("pid %d: %d reads of other processes blocked: %w", pid, total, ErrQuarantined)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if q := g.byPID[pid]; q != nil && (q.hung >= MaxHungPerProcess || time.Now().Before(q.until)) {
		g.refused++
		return fmt.Errorf("pid %d: %w", pid, ErrQuarantined)
	}
	if uid != -2 && g.hungByUID[uid] >= MaxHungPerUser {
		g.refused++
		return fmt.Errorf("pid %d: %d reads of user %d's processes blocked: %w", pid, MaxHungPerUser, uid, ErrQuarantined)
	}
	if g.hungTotal >= MaxHungTotal {
		g.refused++
		return fmt.Errorf("pid %d: %d reads of other processes blocked: %w", pid, g.hungTotal, ErrQuarantined)
	}
	return nil
}

// timedOut records an abandoned read of pid and quarantines the process.
func (g *gate) timedOut(pid int, err error) {
	uid := realUID(pid) // its status, not its memory: takes no mmap lock
	g.mu.Lock()
	g.timeouts++
	g.hungTotal++
	g.prune()
	q := g.byPID[pid]
	if q == nil {
		q = &quarantine{}
		g.byPID[pid] = q
		g.active.Store(int32(len(g.byPID)))
	}
	if q.hung == 0 {
		q.uid = uid
	}
	q.hung++
	g.hungByUID[q.uid]++
	if g.hungByUID[q.uid] == MaxHungPerUser {
		g.saturated.Add(1)
	}
	q.backoff = min(max(2*q.backoff, quarantineMin), quarantineMax)
	q.until = time.Now().Add(q.backoff)
	f := g.onStall
	g.mu.Unlock()
	if f != nil {
		f(pid, err)
	}
}

// released: an abandoned read of pid has returned.
func (g *gate) released(pid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hungTotal--
	if q := g.byPID[pid]; q != nil {
		if g.hungByUID[q.uid] == MaxHungPerUser {
			g.saturated.Add(-1)
		}
		if g.hungByUID[q.uid]--; g.hungByUID[q.uid] <= 0 {
			delete(g.hungByUID, q.uid)
		}
		q.hung--
	}
}

// succeeded forgets pid's history after a read that returned, once its
// backoff has passed.
func (g *gate) succeeded(pid int) {
	if g.active.Load() == 0 {
		return
	}
	g.mu.Lock()
	if q := g.byPID[pid]; q != nil && q.hung == 0 && !time.Now().Before(q.until) {
		delete(g.byPID, pid)
		g.active.Store(int32(len(g.byPID)))
	}
	g.mu.Unlock()
}

// prune drops entries with nothing blocked whose backoff has long passed.
func (g *gate) prune() {
	now := time.Now()
	for pid, q := range g.byPID {
		if q.hung == 0 && now.Sub(q.until) > quarantineMax {
			delete(g.byPID, pid)
		}
	}
	g.active.Store(int32(len(g.byPID)))
}

// Do runs read, a system call of pid's that can take its mmap lock, on
// its own goroutine and waits for it at most the read timeout. read must
// own what it writes: on ErrTimeout it goes on after Do returned, and
// abandoned (when set) runs once it has returned, on its goroutine (to
// close what read used).
func Do(pid int, read func() error, abandoned func()) error {
	if err := g.admit(pid); err != nil {
		return err
	}
	c := &call{done: make(chan error, 1)}
	go func() {
		c.entered.Enter()
		err := read()
		if c.state.CompareAndSwap(0, 1) {
			c.done <- err
			return
		}
		if abandoned != nil {
			abandoned()
		}
		g.released(pid)
	}()
	start := time.Now()
	err, ok := wait(c)
	if !ok {
		if c.state.CompareAndSwap(0, 2) {
			err := fmt.Errorf("pid %d: after %v: %w", pid, time.Since(start).Round(time.Millisecond), ErrTimeout)
			g.timedOut(pid, err)
			return err
		}
		err = <-c.done // it returned just now
	}
	g.succeeded(pid)
	return err
}

// Stalled: err is a timeout or a refusal of this package.
func Stalled(err error) bool { return errors.Is(err, ErrTimeout) || errors.Is(err, ErrQuarantined) }

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otelctx/otelctx/internal/proc/owner"
	"github.com/otelctx/otelctx/internal/proc/procstat"
)

// A read of another process's memory can wait for as long as that process
// likes: a page of a FUSE file whose server never answers, an anonymous page
// registered with userfaultfd whose handler never resolves the fault. No
// signal ends such a wait (a FUSE page's, once its server has the request:
// not even SIGKILL), so the system call is made in the reader helper
// (helper.go), and every read runs on a worker goroutine that waits for the
// helper's reply; the caller waits at most the read timeout. A read past it
// is abandoned: its worker waits for the reply (a thread of the helper stays
// blocked until the kernel returns), its result is dropped, and the process
// is quarantined:
// its reads fail at once (ErrQuarantined) while the abandoned read lasts and
// for a backoff after it, doubling with each timeout.

var (
	// ErrTimeout: the read did not return within the read timeout.
	ErrTimeout = errors.New("read timed out (a page of the target waits on something else: a FUSE server, a userfaultfd handler)")
	// ErrQuarantined: an earlier read of the process hung; it is not read
	// until that read returns and its backoff has passed, or too many
	// reads hang on the host.
	ErrQuarantined = errors.New("process quarantined after a read that hung")
)

// DefaultReadTimeout is how long a read of another process's memory may
// take: a resident page costs microseconds, a swapped-in one milliseconds.
const DefaultReadTimeout = time.Second

// Bounds of what hung reads hold: one blocked thread of the helper and one
// waiting worker each.
const (
	// MaxHungPerProcess: while a process has this many reads blocked, it
	// is not read.
	MaxHungPerProcess = 1
	// MaxHungPerUser: while the processes of one user (userOf: the real
	// UID, or the creator of the process's user namespace, so that UIDs
	// minted in a namespace are one user) have this many reads blocked,
	// that user's processes are not read, so one user's hostile processes
	// cannot use up the host's cap for everyone else.
	MaxHungPerUser = 4
	// MaxHungTotal: while the host has this many reads blocked (it takes
	// 8 users at MaxHungPerUser), no process is read. A round loses at
	// most this many read timeouts, which keeps it under stall_timeout.
	MaxHungTotal = 32
	// The quarantine after a timeout: first quarantineMin, doubling to
	// quarantineMax with each further timeout of the same process.
	quarantineMin = 10 * time.Second
	quarantineMax = 10 * time.Minute
	// maxIdleWorkers stay waiting for work; workers beyond them, and any
	// idle for workerIdle, end.
	maxIdleWorkers = 8
	workerIdle     = 200 * time.Millisecond
	// maxScratchKeep: a worker drops a larger buffer after its read.
	maxScratchKeep = 256 << 10
)

// StallStats is what the read timeouts have done so far.
type StallStats struct {
	Timeouts     uint64 // reads abandoned after the timeout, since start
	Refused      uint64 // reads refused because their process was quarantined
	Hung         int    // reads abandoned and still blocked now
	Quarantined  int    // processes not read now
	OldestHungNs int64  // how long the oldest blocked read has been blocked (0 if none)
}

type deadlineReader struct {
	timeout   atomic.Int64 // nanoseconds
	active    atomic.Int32 // len(byPID): 0 lets a read skip the lock's map lookup
	saturated atomic.Int32 // users at MaxHungPerUser: 0 lets a read skip its UID

	mu        sync.Mutex
	idle      []*worker
	byPID     map[int]*quarantine
	hungTotal int
	hungByUID map[int]int
	timeouts  uint64
	refused   uint64
	onStall   func(pid int, err error)
}

var reader = func() *deadlineReader {
	r := &deadlineReader{byPID: map[int]*quarantine{}, hungByUID: map[int]int{}}
	r.timeout.Store(int64(DefaultReadTimeout))
	return r
}()

// SetReadTimeout sets the bound of every read of another process's memory
// in this program (DefaultReadTimeout until set; d <= 0 restores it).
func SetReadTimeout(d time.Duration) {
	if d <= 0 {
		d = DefaultReadTimeout
	}
	reader.timeout.Store(int64(d))
}

// ReadTimeout is the bound SetReadTimeout set.
func ReadTimeout() time.Duration { return time.Duration(reader.timeout.Load()) }

// OnStall has f called when a process is quarantined after a read of it
// timed out (once per timeout, at most once per quarantine), so that the
// program can log it once; nil stops the calls.
func OnStall(f func(pid int, err error)) {
	reader.mu.Lock()
	reader.onStall = f
	reader.mu.Unlock()
}

// call is one read handed to a worker. The worker reads into its own
// buffers and copies into the caller's only if the caller still waits, so
// that an abandoned read never writes into memory the caller reuses.
type call struct {
	pid   int
	dst   [][]byte // the caller's buffers
	dstOK []bool   // the caller's flags (ReadEach)
	one   [1][]byte
	addrs []uint64 // the worker's copy
	bufs  [][]byte // the worker's buffers, over scratch
	ok    []bool
	each  bool // ReadEach semantics (else one ReadAt)

	scratch []byte
	calls   int
	err     error
	// state: 0 running, 1 finished (the worker copies), 2 abandoned.
	state atomic.Int32
	// entered: when the worker began the system call.
	// Before that the delay is this host's (no CPU for the worker yet),
	// after it the target's: its pages can keep the call busy or asleep.
	entered Entry
	// helperPID and helperTID: the helper's thread that makes the call,
	// set before entered (whose atomic store publishes them).
	helperPID, helperTID int
}

type worker struct {
	// dropped: park left w out of the full pool; its idle timer ends it.
	dropped bool
	req     chan struct{}
	done    chan struct{}
	timer   *time.Timer // the caller's deadline
	c       call
	conn    *conn // to the reader helper (helper.go)
}

// userOf is the user pid's hung reads count against (package owner).
func userOf(pid int) int { return owner.Of("/proc", pid, procstat.RealUID("/proc", pid)) }

// acquire refuses a read of a quarantined process, else returns a worker.
func (r *deadlineReader) acquire(pid int) (*worker, error) {
	uid := -2 // not looked up: no user is at its cap
	if r.saturated.Load() != 0 {
		uid = userOf(pid)
	}
	r.mu.Lock()
	if r.active.Load() != 0 {
		if q := r.byPID[pid]; q != nil {
			if q.hung >= MaxHungPerProcess || time.Now().Before(q.until) {
				r.refused++
				r.mu.Unlock()
				return nil, fmt.Errorf("pid %d: %w", pid, ErrQuarantined)
			}
		}
	}
	if uid != -2 && r.hungByUID[uid] >= MaxHungPerUser {
		r.refused++
		r.mu.Unlock()
		return nil, fmt.Errorf("pid %d: %d reads of user %d's processes blocked: %w", pid, MaxHungPerUser, uid, ErrQuarantined)
	}
	if r.hungTotal >= MaxHungTotal {
		r.refused++
		r.mu.Unlock()
		return nil, fmt.Errorf("pid %d: %d reads of other processes blocked: %w", pid, r.hungTotal, ErrQuarantined)
	}
	if n := len(r.idle); n > 0 {
		w := r.idle[n-1]
		r.idle = r.idle[:n-1]
		r.mu.Unlock()
		return w, nil
	}
	r.mu.Unlock()
	w := &worker{req: make(chan struct{}, 1), done: make(chan struct{}, 1), timer: time.NewTimer(time.Hour)}
	w.timer.Stop()
	go w.run(r)
	return w, nil
}

func (w *worker) run(r *deadlineReader) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case <-w.req:
		case <-idle.C:
			if r.retire(w) {
				theHelper.closeConn(w)
				return
			}
			idle.Reset(workerIdle)
			continue
		}
		c := &w.c
		if beforeRawRead != nil {
			beforeRawRead()
		}
		c.calls, c.err = 0, nil
		theHelper.read(w) // enters c.entered once the request is sent
		if c.state.CompareAndSwap(0, 1) {
			for i, d := range c.dst {
				copy(d, c.bufs[i])
			}
			copy(c.dstOK, c.ok)
			c.dst, c.dstOK, c.one[0] = nil, nil, nil
			w.done <- struct{}{}
			// The caller puts w back in the pool once it has the result.
		} else {
			// Abandoned: the caller has gone; w may serve again.
			c.dst, c.dstOK, c.one[0] = nil, nil, nil
			r.released(c.pid)
			r.park(w)
		}
		idle.Reset(workerIdle)
	}
}

// retire takes an idle worker out of the pool: true if it was there, or
// left out of it (it ends), false if a caller has just taken it.
func (r *deadlineReader) retire(w *worker) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.dropped {
		return true
	}
	for i, x := range r.idle {
		if x == w {
			r.idle = append(r.idle[:i], r.idle[i+1:]...)
			return true
		}
	}
	return false
}

// park returns w to the pool, or lets it end when the pool is full.
func (r *deadlineReader) park(w *worker) {
	if cap(w.c.scratch) > maxScratchKeep {
		w.c.scratch = nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.idle) < maxIdleWorkers {
		r.idle = append(r.idle, w)
		return
	}
	w.dropped = true
}

// do runs the read set up in w.c and waits for it at most the timeout.
// Unless the read was abandoned, the caller takes its results from w.c
// and then parks w.
func (r *deadlineReader) do(w *worker) (int, error) {
	c := &w.c
	c.state.Store(0)
	c.entered.Reset()
	start := time.Now()
	timeout := time.Duration(r.timeout.Load())
	w.timer.Reset(timeout)
	w.req <- struct{}{}
	if !r.await(w, timeout) {
		if c.state.CompareAndSwap(0, 2) {
			err := fmt.Errorf("pid %d: after %v: %w", c.pid, time.Since(start).Round(time.Millisecond), ErrTimeout)
			r.timedOut(c.pid, start, err)
			return 0, err
		}
		<-w.done // the worker finished just now and is copying
	}
	if c.err == nil {
		r.succeeded(c.pid)
	}
	return c.calls, c.err
}

// await waits for w's read at most the timeout of its system call: a read
// whose helper thread is runnable or stopped at the deadline is late for
// this host's reasons, not the target's, and is waited for again (at most
// MaxReadWaits timeouts in all).
func (r *deadlineReader) await(w *worker, timeout time.Duration) bool {
	c := &w.c
	for waits := 0; ; {
		_, n, ok := Await(w.done, &c.entered, w.timer, timeout)
		if ok {
			return true
		}
		waits += n
		if waits >= MaxReadWaits || c.entered.at.Load() == 0 || !helperStarved(c.helperPID, c.helperTID) {
			return false
		}
		c.entered.Enter()
		w.timer.Reset(timeout)
	}
}

// beforeRawRead, when set (tests), runs on the worker before each read.
var beforeRawRead func()

// prepare copies the addresses and sizes the read needs into w's own
// buffers.
func (c *call) prepare(pid int, dst [][]byte, addrs []uint64) {
	c.pid, c.dst = pid, dst
	total := 0
	for _, b := range dst {
		total += len(b)
	}
	if cap(c.scratch) < total {
		c.scratch = make([]byte, total)
	}
	c.scratch = c.scratch[:total]
	c.bufs = c.bufs[:0]
	off := 0
	for _, b := range dst {
		c.bufs = append(c.bufs, c.scratch[off:off+len(b):off+len(b)])
		off += len(b)
	}
	c.addrs = append(c.addrs[:0], addrs...)
	if cap(c.ok) < len(dst) {
		c.ok = make([]bool, len(dst))
	}
	c.ok = c.ok[:len(dst)]
}

func (r *deadlineReader) readAt(pid int, p []byte, addr uint64) error {
	w, err := r.acquire(pid)
	if err != nil {
		return err
	}
	w.c.each = false
	w.c.one[0] = p
	w.c.prepare(pid, w.c.one[:], nil)
	w.c.addrs = append(w.c.addrs[:0], addr)
	if _, err = r.do(w); errors.Is(err, ErrTimeout) {
		return err
	}
	r.park(w)
	return err
}

// readUint64 is readAt of 8 bytes taken from the worker's buffer (a
// caller's variable handed to the worker would escape to the heap).
func (r *deadlineReader) readUint64(pid int, addr uint64) (uint64, error) {
	w, err := r.acquire(pid)
	if err != nil {
		return 0, err
	}
	c := &w.c
	c.each = false
	c.one[0] = nil
	c.pid, c.dst = pid, nil
	if cap(c.scratch) < 8 {
		c.scratch = make([]byte, 8)
	}
	c.bufs = append(c.bufs[:0], c.scratch[:8])
	c.addrs = append(c.addrs[:0], addr)
	if _, err = r.do(w); errors.Is(err, ErrTimeout) {
		return 0, err
	}
	v := binary.NativeEndian.Uint64(c.scratch[:8])
	r.park(w)
	return v, err
}

func (r *deadlineReader) readEach(pid int, bufs [][]byte, addrs []uint64, ok []bool) (int, error) {
	clear(ok)
	w, err := r.acquire(pid)
	if err != nil {
		return 0, err
	}
	w.c.each = true
	w.c.prepare(pid, bufs, addrs)
	w.c.dstOK = ok
	calls, err := r.do(w)
	if errors.Is(err, ErrTimeout) {
		return 0, err
	}
	r.park(w)
	return calls, err
}

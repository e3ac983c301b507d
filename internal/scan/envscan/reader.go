// SPDX-License-Identifier: Apache-2.0

//go:build linux

// A Reader reads another process's environment (/proc/PID/environ) with
// a time bound. The kernel copies the environment out of the
// process's own memory under its mmap lock, which the process can keep
// from us (a thread stuck in a fault on a FUSE page while another waits
// to map: new readers queue behind the writer). So the read runs on its
// own goroutine and the caller waits for it as for a read of the process's
// memory (remote.Await): the deadline counts from the goroutine's first
// system call, not from while it waits for a CPU. A read still
// blocked then is abandoned: it ends when the kernel lets it (its result
// is dropped), and at most MaxAbandoned are left at once, past which reads
// are refused until one ends. So that one user's processes cannot take
// every slot, a process whose read is still running is not read again,
// and a user's processes hold at most MaxAbandonedPerUser of them.

package envscan

import (
	"errors"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otelctx/otelctx/internal/proc/owner"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/proc/remote"
)

// Defaults: a read takes well under a millisecond once running; the
// deadline is for the caller's budget (a batch of data waits on it), not
// for slow pages. A worker not yet running on a loaded host is waited for
// up to remote.MaxReadWaits deadlines.
const (
	DefaultTimeout      = 100 * time.Millisecond
	DefaultMaxAbandoned = 8
	// MaxAbandonedPerUser: the reads of one user's processes running at
	// once (blocked ones included).
	MaxAbandonedPerUser = 2
	// DefaultMaxBytes bounds the bytes read: the kernel lets an
	// environment take up to a quarter of the stack limit.
	DefaultMaxBytes = 16 << 20
	chunk           = 64 << 10
)

var (
	// ErrTimeout: the read did not end by the deadline; it was abandoned.
	ErrTimeout = errors.New("environ read timed out")
	// ErrBusy: MaxAbandoned reads are still blocked, or
	// MaxAbandonedPerUser of the process owner's, or one of this PID's;
	// none is started.
	ErrBusy = errors.New("too many environ reads blocked")
	// ErrReused: the PID changed holder during the read.
	ErrReused = errors.New("pid reused during environ read")
	// ErrTooLarge: the environment is over MaxBytes; what was read is
	// given to consume, the rest is not read.
	ErrTooLarge = errors.New("environ over the size limit")
)

// Reader reads environments; its zero value is not ready: use NewReader.
type Reader struct {
	procRoot     string
	timeout      time.Duration
	maxAbandoned int32
	maxBytes     int64
	abandoned    atomic.Int32

	mu      sync.Mutex
	running map[int]bool  // PIDs whose read has not ended
	perUser map[int]int32 // reads running, by the process's real UID
}

// NewReader makes a reader of procRoot (normally "/proc"); zero values take the
// defaults.
func NewReader(procRoot string, timeout time.Duration, maxAbandoned int, maxBytes int64) *Reader {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if maxAbandoned <= 0 {
		maxAbandoned = DefaultMaxAbandoned
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return &Reader{procRoot: procRoot, timeout: timeout, maxAbandoned: int32(maxAbandoned), maxBytes: maxBytes,
		running: map[int]bool{}, perUser: map[int]int32{}}
}

// Abandoned is the number of reads still blocked after their deadline.
func (r *Reader) Abandoned() int { return int(r.abandoned.Load()) }

// Read gives pid's environment to consume, in pieces, on another
// goroutine, and returns the process's start ticks (its identity with
// pid), the same before and after the read. On ErrTimeout consume may
// still be called after Read returned: it must own its state, which the
// caller then drops.
func (r *Reader) Read(pid int, consume func([]byte)) (startTicks uint64, err error) {
	return r.ReadAs(pid, Owner(r.procRoot, pid), consume)
}

// Owner is the user pid's reads count against (package owner: UIDs minted
// in a user namespace are one user); -1, unreadable, is a share of its own.
func Owner(procRoot string, pid int) int {
	return owner.Of(procRoot, pid, procstat.RealUID(procRoot, pid))
}

// ReadAs is Read for a caller that knows pid's Owner already.
func (r *Reader) ReadAs(pid, uid int, consume func([]byte)) (startTicks uint64, err error) {
	before, err := procstat.StartTicks(r.procRoot, pid)
	if err != nil {
		return 0, err
	}
	if !r.claim(pid, uid) {
		return 0, ErrBusy
	}
	done := make(chan error, 1)
	entered := new(remote.Entry)
	t := time.NewTimer(r.timeout)
	go func() {
		if beforeOpen != nil {
			beforeOpen()
		}
		entered.Enter() // from the open on, the process can keep us
		err := r.copy(pid, consume)
		r.release(pid, uid) // before the result: the caller may read pid again at once
		done <- err
	}()
	err, _, ok := remote.Await(done, entered, t, r.timeout)
	if !ok {
		return 0, ErrTimeout
	}
	after, serr := procstat.StartTicks(r.procRoot, pid)
	switch {
	case serr != nil:
		return 0, serr // exited during the read: what it gave may be anyone's
	case after != before:
		return 0, ErrReused
	}
	return before, err
}

// claim counts a read of pid (owned by uid) as running, unless the
// reader's, the user's or this PID's share is taken.
func (r *Reader) claim(pid, uid int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running[pid] || r.perUser[uid] >= MaxAbandonedPerUser || r.abandoned.Load() >= r.maxAbandoned {
		return false
	}
	r.running[pid] = true
	r.perUser[uid]++
	r.abandoned.Add(1) // counted as abandoned until it ends
	return true
}

func (r *Reader) release(pid, uid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.running, pid)
	if r.perUser[uid]--; r.perUser[uid] <= 0 {
		delete(r.perUser, uid)
	}
	r.abandoned.Add(-1)
}

// beforeOpen, when set (tests), runs on the read's goroutine before it
// begins.
var beforeOpen func()

func (r *Reader) copy(pid int, consume func([]byte)) error {
	f, err := os.Open(r.procRoot + "/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, chunk)
	var total int64
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if total+int64(n) > r.maxBytes {
				consume(buf[:r.maxBytes-total])
				return ErrTooLarge
			}
			total += int64(n)
			consume(buf[:n])
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

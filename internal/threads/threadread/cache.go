// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadread

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/otelctx/otelctx/internal/proc/lockread"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// Cache keeps tlsvar.Resolve's result per process identity (PIDs are reused)
// until its file-backed mappings change (a dlopen may move the variable's
// module). Failures are cached too, except tlsvar.ErrTransient; a
// resolution that timed out or was refused as busy is tried again after
// RetryBlocked (it says nothing about the process, only that a file did
// not answer then).
type Cache struct {
	ProcRoot string
	// ResolveContext defaults to tlsvar.ResolveContext; its context is
	// cancelled when the resolution is given up, so it stops allocating.
	ResolveContext func(ctx context.Context, procRoot string, pid int) (*tlsvar.Location, error)
	// Resolve, when set, is used instead (tests).
	Resolve func(procRoot string, pid int) (*tlsvar.Location, error)

	ResolveTimeout time.Duration
	// RetryBlocked defaults to DefaultRetryBlocked.
	RetryBlocked time.Duration
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time

	mu          sync.Mutex
	entries     map[int]*cacheEntry
	resolutions int
	// running holds the PIDs with a resolution not yet returned, stuck
	// counts those among them given up on: one PID holds at most one;
	// stuckBy counts them per user of their process (publisher.Process.Owner).
	running map[int]bool
	stuck   int
	stuckBy map[int]int
}

// DefaultResolveTimeout: a cold resolution takes milliseconds; seconds means
// a file on a server that does not answer (FUSE, hung NFS). Nothing
// interrupts such a call, so it is left behind.
const DefaultResolveTimeout = 5 * time.Second

// DefaultRetryBlocked paces the lookups of a process whose last resolution
// timed out; a new one starts only once the blocked one has returned.
const DefaultRetryBlocked = 30 * time.Second

// maxAbandoned bounds the resolutions left blocked, one per PID at most,
// and maxAbandonedPerUser those of the processes of one user: past
// either, ErrResolveBusy (for that user only, below the host's bound).
// One user's wedged resolutions thus take at most 2 of the 8 slots; filling
// them takes processes of 4 users (UIDs minted in one user namespace are
// one user: package owner).
const (
	maxAbandoned        = 8
	maxAbandonedPerUser = 2
)

var (
	ErrResolveTimeout = errors.New("TLS resolution timed out (a file of the process is on a file system that does not answer)")
	ErrResolveBusy    = errors.New("TLS resolution refused: earlier ones are still blocked on files that do not answer")
	// ErrResolveStillBlocked: the process's previous resolution has not
	// returned, so no other is started for it.
	ErrResolveStillBlocked = fmt.Errorf("%w; the previous one has not returned yet", ErrResolveTimeout)
)

type cacheEntry struct {
	start uint64
	maps  uint64
	loc   *tlsvar.Location
	err   error
	// retryAt, when set, ends the entry: a blocked resolution's failure.
	retryAt time.Time
}

func NewCache(procRoot string) *Cache {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &Cache{ProcRoot: procRoot, ResolveContext: tlsvar.ResolveContext, entries: map[int]*cacheEntry{}, running: map[int]bool{}, stuckBy: map[int]int{}}
}

// Location is LocationFor of a process whose user is not known (-1: one
// user for the shares of blocked resolutions).
func (c *Cache) Location(pid int) (*tlsvar.Location, error) { return c.LocationFor(pid, -1) }

// LocationFor returns where pid's TLS variable is; uid is the process's
// user (publisher.Process.Owner: its real UID, or its user namespace's
// creator), which its share of blocked resolutions is counted against.
func (c *Cache) LocationFor(pid, uid int) (*tlsvar.Location, error) {
	start, err := procstat.StartTicks(c.ProcRoot, pid)
	if err != nil {
		c.Forget(pid)
		return nil, err
	}
	sig, err := mapsSignature(c.ProcRoot, pid)
	if err != nil {
		c.Forget(pid)
		return nil, err
	}
	now := c.now()
	c.mu.Lock()
	if e, ok := c.entries[pid]; ok && e.start == start && e.maps == sig && (e.retryAt.IsZero() || now.Before(e.retryAt)) {
		c.mu.Unlock()
		return e.loc, e.err
	}
	c.resolutions++
	c.mu.Unlock()
	// Not under the lock: other processes' lookups need not wait up to the timeout.
	loc, err := c.resolve(pid, uid)
	c.mu.Lock()
	switch {
	case errors.Is(err, tlsvar.ErrTransient):
		delete(c.entries, pid) // nothing learned: the next lookup resolves again
	case errors.Is(err, ErrResolveStillBlocked):
		// A concurrent lookup's resolution may have just been cached: keep it.
		if e, ok := c.entries[pid]; !ok || !e.retryAt.IsZero() {
			c.entries[pid] = &cacheEntry{start: start, maps: sig, err: err, retryAt: now.Add(c.retryBlocked())}
		}
	case errors.Is(err, ErrResolveTimeout), errors.Is(err, ErrResolveBusy):
		c.entries[pid] = &cacheEntry{start: start, maps: sig, err: err, retryAt: now.Add(c.retryBlocked())}
	default:
		c.entries[pid] = &cacheEntry{start: start, maps: sig, loc: loc, err: err}
	}
	c.mu.Unlock()
	return loc, err
}

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Cache) retryBlocked() time.Duration {
	if c.RetryBlocked > 0 {
		return c.RetryBlocked
	}
	return DefaultRetryBlocked
}

func (c *Cache) resolve(pid, uid int) (*tlsvar.Location, error) {
	c.mu.Lock()
	switch {
	case c.running[pid]:
		c.mu.Unlock()
		return nil, fmt.Errorf("pid %d: %w", pid, ErrResolveStillBlocked)
	case c.stuck >= maxAbandoned:
		c.mu.Unlock()
		return nil, ErrResolveBusy
	case c.stuckBy[uid] >= maxAbandonedPerUser:
		c.mu.Unlock()
		return nil, fmt.Errorf("%w (uid %d has %d)", ErrResolveBusy, uid, maxAbandonedPerUser)
	}
	c.running[pid] = true
	c.mu.Unlock()
	timeout := c.ResolveTimeout
	if timeout <= 0 {
		timeout = DefaultResolveTimeout
	}
	type result struct {
		loc *tlsvar.Location
		err error
	}
	var finished, abandoned bool // under c.mu
	done := make(chan result, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // given up on, or returned
	go func() {
		loc, err := c.call(ctx, pid)
		c.mu.Lock()
		finished = true
		delete(c.running, pid)
		if abandoned {
			c.stuck--
			if c.stuckBy[uid]--; c.stuckBy[uid] <= 0 {
				delete(c.stuckBy, uid)
			}
		}
		c.mu.Unlock()
		done <- result{loc, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.loc, r.err
	case <-timer.C:
		c.mu.Lock()
		if !finished {
			abandoned = true
			c.stuck++
			c.stuckBy[uid]++
		}
		c.mu.Unlock()
		if !abandoned {
			r := <-done
			return r.loc, r.err
		}
		return nil, fmt.Errorf("pid %d: %w after %v", pid, ErrResolveTimeout, timeout)
	}
}

func (c *Cache) call(ctx context.Context, pid int) (*tlsvar.Location, error) {
	switch {
	case c.Resolve != nil:
		return c.Resolve(c.ProcRoot, pid)
	case c.ResolveContext != nil:
		return c.ResolveContext(ctx, c.ProcRoot, pid)
	}
	return tlsvar.ResolveContext(ctx, c.ProcRoot, pid)
}

// Abandoned is the number of resolutions given up on and not yet returned.
func (c *Cache) Abandoned() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stuck
}

func (c *Cache) Resolutions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resolutions
}

func (c *Cache) Forget(pid int) {
	c.mu.Lock()
	delete(c.entries, pid)
	c.mu.Unlock()
}

func (c *Cache) Retain(keep func(pid int) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid := range c.entries {
		if !keep(pid) {
			delete(c.entries, pid)
		}
	}
}

func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// mapsSignature hashes file-backed mappings only: anonymous ones come and go
// with malloc and stacks and cannot move a TLS variable.
// Its reads take the process's mmap lock: they run under a deadline
// (package lockread), so a process holding the lock costs its caller (the
// eBPF sync) one read timeout, then nothing while it is quarantined.
func mapsSignature(procRoot string, pid int) (uint64, error) {
	f, err := lockread.Open(procRoot+"/"+strconv.Itoa(pid)+"/maps", pid)
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	defer f.Close()
	h := fnv.New64a()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		// A path starting with '/' is a file (memfd names too; harmless).
		slash := bytes.IndexByte(line, '/')
		if slash < 0 {
			continue
		}
		dash := bytes.IndexByte(line, '-')
		if dash < 0 {
			continue
		}
		h.Write(line[:dash])
		h.Write(line[slash:])
		h.Write([]byte{'\n'})
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("pid %d: reading maps: %w", pid, err)
	}
	return h.Sum64(), nil
}

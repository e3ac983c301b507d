package threadread

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otelctx/otelctx/internal/scan/procstat"
	"github.com/otelctx/otelctx/internal/scan/tlsvar"
)

// Cache keeps the result of tlsvar.Resolve per process, so that the ELF
// files and the dynamic linker's structures are read once per process, not
// once per snapshot. An entry is keyed by PID and start time (PIDs are
// reused) and is redone when the file-backed mappings of the process change
// (a dlopen or dlclose may add or move the variable's module). Failures are
// cached the same way: a process without the symbol is not re-resolved until
// it maps something new. Transient ones (tlsvar.ErrTransient: the process's
// files could not be read this time) are not: the next lookup resolves again.
//
// Checking an entry costs one read of /proc/PID/stat and one of
// /proc/PID/maps, hashed on the fly; resolving costs ELF parsing.
type Cache struct {
	// ProcRoot is the procfs mount, default "/proc".
	ProcRoot string
	// Resolve is the resolver, default tlsvar.Resolve (tests replace it).
	Resolve func(procRoot string, pid int) (*tlsvar.Location, error)

	// ResolveTimeout bounds one resolution (default DefaultResolveTimeout).
	ResolveTimeout time.Duration

	mu      sync.Mutex
	entries map[int]*cacheEntry
	// Resolutions counts calls of Resolve (tests, telemetry).
	resolutions int
	// abandoned counts resolutions given up after their timeout and still
	// blocked (at most maxAbandoned).
	abandoned atomic.Int32
}

// DefaultResolveTimeout bounds a resolution. A cold one reads ELF files
// for a few milliseconds; one that takes seconds is blocked: a stat, open
// or read of a module on a file system whose server does not answer
// (FUSE, a hung NFS mount). Nothing interrupts such a call, so it is left
// behind, and the process gets ErrResolveTimeout.
const DefaultResolveTimeout = 5 * time.Second

// maxAbandoned bounds the resolutions left blocked at once; past it,
// resolutions are refused (ErrResolveBusy) until one returns.
const maxAbandoned = 4

// Errors of a resolution that did not run to its end.
var (
	ErrResolveTimeout = errors.New("TLS resolution timed out (a file of the process is on a file system that does not answer)")
	ErrResolveBusy    = errors.New("TLS resolution refused: earlier ones are still blocked on files that do not answer")
)

type cacheEntry struct {
	start uint64
	maps  uint64
	loc   *tlsvar.Location
	err   error
}

// NewCache returns an empty cache reading procRoot ("" = "/proc").
func NewCache(procRoot string) *Cache {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &Cache{ProcRoot: procRoot, Resolve: tlsvar.Resolve, entries: map[int]*cacheEntry{}}
}

// Location returns the cached resolution for pid, resolving it again when
// the process is new, was replaced (PID reuse), or changed its mappings.
func (c *Cache) Location(pid int) (*tlsvar.Location, error) {
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
	c.mu.Lock()
	if e, ok := c.entries[pid]; ok && e.start == start && e.maps == sig {
		c.mu.Unlock()
		return e.loc, e.err
	}
	c.resolutions++
	c.mu.Unlock()
	// Not under the lock: a resolution may take up to its timeout, and
	// other processes' lookups need not wait for it.
	loc, err := c.resolve(pid)
	c.mu.Lock()
	if errors.Is(err, tlsvar.ErrTransient) {
		delete(c.entries, pid) // nothing learned: the next lookup resolves again
	} else {
		c.entries[pid] = &cacheEntry{start: start, maps: sig, loc: loc, err: err}
	}
	c.mu.Unlock()
	return loc, err
}

// resolve runs Resolve with a deadline. A resolution past it is left to
// finish (or not) in its goroutine; its result is dropped.
func (c *Cache) resolve(pid int) (*tlsvar.Location, error) {
	if c.abandoned.Load() >= maxAbandoned {
		return nil, ErrResolveBusy
	}
	timeout := c.ResolveTimeout
	if timeout <= 0 {
		timeout = DefaultResolveTimeout
	}
	type result struct {
		loc *tlsvar.Location
		err error
	}
	done := make(chan result, 1)
	go func() {
		loc, err := c.Resolve(c.ProcRoot, pid)
		done <- result{loc, err}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.loc, r.err
	case <-timer.C:
		c.abandoned.Add(1)
		go func() {
			<-done
			c.abandoned.Add(-1)
		}()
		return nil, fmt.Errorf("pid %d: %w after %v", pid, ErrResolveTimeout, timeout)
	}
}

// Abandoned is the number of resolutions given up and still blocked.
func (c *Cache) Abandoned() int { return int(c.abandoned.Load()) }

// Resolutions is how many times the cache called the resolver.
func (c *Cache) Resolutions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resolutions
}

// Forget drops pid's entry (the process is gone or no longer tracked).
func (c *Cache) Forget(pid int) {
	c.mu.Lock()
	delete(c.entries, pid)
	c.mu.Unlock()
}

// Retain drops the entries of PIDs for which keep is false.
func (c *Cache) Retain(keep func(pid int) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid := range c.entries {
		if !keep(pid) {
			delete(c.entries, pid)
		}
	}
}

// Len is the number of cached processes.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// mapsSignature hashes the file-backed mappings of pid (start address and
// path): anonymous mappings come and go with malloc and thread stacks and
// cannot move a TLS variable, file-backed ones change on dlopen/dlclose.
func mapsSignature(procRoot string, pid int) (uint64, error) {
	f, err := os.Open(procRoot + "/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	defer f.Close()
	h := fnv.New64a()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		// address perms offset dev inode path: a path starting with '/'
		// is a file (memfd names too; harmless).
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

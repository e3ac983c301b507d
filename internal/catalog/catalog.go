// Package catalog is the in-memory state a processctx receiver shares with
// the processors of the same collector: the process contexts it tracks, by
// PID. (Thread records join it in a later version.)
//
// The receiver is the only writer; readers take a read lock for one lookup.
package catalog

import (
	"fmt"
	"sync"

	"go.opentelemetry.io/collector/component"

	"github.com/otelctx/otelctx/internal/scan"
)

// Catalog holds the current process contexts of one receiver.
type Catalog struct {
	mu    sync.RWMutex
	procs map[int]*scan.Process
}

// New returns an empty catalog.
func New() *Catalog { return &Catalog{procs: map[int]*scan.Process{}} }

// Process returns the context of pid, if it publishes one. The returned
// value is immutable. A caller holding a start time for pid must compare it
// with Process.ID.StartTicks / CreationTime: PIDs are reused.
func (c *Catalog) Process(pid int) (*scan.Process, bool) {
	c.mu.RLock()
	p, ok := c.procs[pid]
	c.mu.RUnlock()
	return p, ok
}

// Len is the number of processes in the catalog.
func (c *Catalog) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.procs)
}

// Apply records the scanner's events.
func (c *Catalog) Apply(events []scan.Event) {
	if len(events) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range events {
		pid := e.Process.ID.PID
		switch e.Kind {
		case scan.Found, scan.Updated:
			c.procs[pid] = e.Process
		case scan.Lost:
			// Only forget the identity that was lost: a successor with the
			// same PID may already have been found in the same scan.
			if cur, ok := c.procs[pid]; ok && cur.ID == e.Process.ID {
				delete(c.procs, pid)
			}
		}
	}
}

var (
	registryMu sync.Mutex
	registry   = map[component.ID]*Catalog{}
)

// Register makes c findable by the receiver's component ID.
func Register(id component.ID, c *Catalog) error {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, ok := registry[id]; ok {
		return fmt.Errorf("catalog for %q already registered", id)
	}
	registry[id] = c
	return nil
}

// Unregister removes the catalog of id, if c is the one registered.
func Unregister(id component.ID, c *Catalog) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if registry[id] == c {
		delete(registry, id)
	}
}

// Lookup finds the catalog of a running receiver.
func Lookup(id component.ID) (*Catalog, bool) {
	registryMu.Lock()
	defer registryMu.Unlock()
	c, ok := registry[id]
	return c, ok
}

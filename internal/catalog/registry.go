package catalog

import (
	"fmt"
	"sync"

	"go.opentelemetry.io/collector/component"
)

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

// Find finds the catalog of a running receiver.
func Find(id component.ID) (*Catalog, bool) {
	registryMu.Lock()
	defer registryMu.Unlock()
	c, ok := registry[id]
	return c, ok
}

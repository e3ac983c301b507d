// SPDX-License-Identifier: Apache-2.0

//go:build linux

package entityevents

import "github.com/otelctx/otelctx/internal/publisher"

// claims are the entities each announced process claims, so that an entity
// is deleted only when no live process announces it any more: a process
// that publishes another's service.instance.id and exits must not get that
// entity deleted. Owned by the watcher's poll goroutine.
type claims struct {
	holders map[string]int // entity key: processes announcing it
	of      map[publisher.ProcessID][]string
}

func newClaims() *claims {
	return &claims{holders: map[string]int{}, of: map[publisher.ProcessID][]string{}}
}

// announce records that id announces ents (in place of what it announced
// before) and returns the keys no process announces any more.
func (c *claims) announce(id publisher.ProcessID, ents []entity) (orphaned map[string]bool) {
	keys := make([]string, 0, len(ents))
	for _, e := range ents {
		if k := e.key(); !contains(keys, k) {
			keys = append(keys, k)
			c.holders[k]++
		}
	}
	orphaned = c.release(c.of[id])
	c.of[id] = keys
	return orphaned
}

// withdraw: id announces nothing any more; it returns the keys no process
// announces any more.
func (c *claims) withdraw(id publisher.ProcessID) (orphaned map[string]bool) {
	orphaned = c.release(c.of[id])
	delete(c.of, id)
	return orphaned
}

func (c *claims) release(keys []string) map[string]bool {
	var orphaned map[string]bool
	for _, k := range keys {
		if c.holders[k]--; c.holders[k] > 0 {
			continue
		}
		delete(c.holders, k)
		if orphaned == nil {
			orphaned = map[string]bool{}
		}
		orphaned[k] = true
	}
	return orphaned
}

func contains(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

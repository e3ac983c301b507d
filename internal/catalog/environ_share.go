// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"github.com/otelctx/otelctx/internal/publisher"
)

// otelenvCost is what ent holds besides envEntrySize: its Process, whose
// resource is what the environment named.
func otelenvCost(ent *envEntry) int {
	if ent.proc == nil {
		return 0
	}
	return ent.proc.Cost()
}

// memory is what the entries hold, and its bound.
func (e *envSource) memory() (held, bound int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return int64(e.bytes), int64(e.maxBytes)
}

// The methods below hold e.mu.

func (e *envSource) charge(ent *envEntry, d int) {
	sh := e.shares[ent.owner]
	if sh == nil {
		sh = &envShare{}
		e.shares[ent.owner] = sh
	}
	sh.n += d
	sh.bytes += d * ent.cost
	e.bytes += d * ent.cost
	if sh.n <= 0 {
		delete(e.shares, ent.owner)
	}
}

// drop forgets ent.
func (e *envSource) drop(ent *envEntry) {
	ent.close()
	delete(e.byPID, ent.id.PID)
	e.charge(ent, -1)
}

// makeRoom makes room for ent at the bounds: the user holding the most
// (entries, or bytes at the memory bound) gives up its least recently
// confirmed entry if it holds more than ent's user would with ent, else
// ent's user gives up its own (the largest if ent's holds none). Users minting UIDs in a namespace are one
// user (package owner), so their entries cannot push out everyone else's.
func (e *envSource) makeRoom(ent *envEntry) {
	for len(e.byPID) > 0 {
		mine := e.shares[ent.owner]
		var of func(*envShare) int
		var mineWith int
		switch {
		case len(e.byPID) >= e.max:
			of = func(sh *envShare) int { return sh.n }
			mineWith = 1
		case e.bytes+ent.cost > e.maxBytes:
			of = func(sh *envShare) int { return sh.bytes }
			mineWith = ent.cost
		default:
			return
		}
		if mine != nil {
			mineWith += of(mine)
		}
		largest, most := 0, -1
		for o, sh := range e.shares {
			if n := of(sh); n > most || (n == most && o < largest) {
				largest, most = o, n
			}
		}
		if most <= mineWith && e.evictOldestOf(ent.owner) {
			continue
		}
		// ent's user holds nothing yet and no user more than it would:
		// the largest gives up one all the same, so the bounds hold
		// against any number of users.
		e.evictOldestOf(largest)
	}
}

// evictOldestOf drops owner's entry confirmed longest ago; false if owner
// has none.
func (e *envSource) evictOldestOf(owner int) bool {
	var oldest *envEntry
	for _, ent := range e.byPID {
		if ent.owner == owner && (oldest == nil || ent.checked < oldest.checked) {
			oldest = ent
		}
	}
	if oldest == nil {
		return false
	}
	e.drop(oldest)
	e.evicted.Add(1)
	return true
}

// NamedByEnvironment reports whether the catalog knows p by its
// environment alone (it publishes nothing).
func NamedByEnvironment(p *publisher.Process) bool { return p.FromEnvironment }

// EnvFills reports whether p's environment value of key goes onto p's
// resource: p's published resource wins, the environment fills what it
// lacks.
func EnvFills(p *publisher.Process, key string) bool {
	for i := range p.Context.Resource.Attributes {
		if p.Context.Resource.Attributes[i].Key == key {
			return false
		}
	}
	return true
}

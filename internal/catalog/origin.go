// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import "github.com/otelctx/otelctx/internal/publisher"

// owner is the retained exits of one user (the processes' publisher.Owner:
// their real UID, or the creator of their user namespace, so that UIDs
// minted in a namespace are one user), and origin those of one of its executables. At the retention bound
// the owner holding the most exits gives up the oldest of its executable
// holding the most, so one user's churn of short-lived publishers, under
// any number of executable paths it chooses, evicts its own exits, not
// another user's whose late profiles still arrive.
type owner struct {
	uid     int
	n       int
	at      int // position in Catalog.byRetained
	origins map[string]*origin
	byExe   ranking[*origin]
}

type origin struct {
	owner *owner
	exe   string
	// q: the exits in the order they were retired, oldest first; entries
	// of exits already dropped another way are stale and skipped.
	q  []exitEntry
	n  int
	at int // position in owner.byExe
}

func newRetainedRanking() ranking[*owner] {
	return ranking[*owner]{
		before: func(a, b *owner) bool {
			if a.n != b.n {
				return a.n > b.n
			}
			return oldest(a.byExe.first()) < oldest(b.byExe.first()) // among equals, the oldest exit first
		},
		slot: func(o *owner) *int { return &o.at },
	}
}

func newExeRanking() ranking[*origin] {
	return ranking[*origin]{
		before: func(a, b *origin) bool {
			if a.n != b.n {
				return a.n > b.n
			}
			return oldest(a) < oldest(b)
		},
		slot: func(o *origin) *int { return &o.at },
	}
}

// oldest is the retirement time of o's oldest queued exit.
func oldest(o *origin) int64 {
	if o == nil || len(o.q) == 0 {
		return 1<<63 - 1
	}
	return o.q[0].exitedAt
}

// exeOf: the observed executable (a publisher cannot choose another's).
func exeOf(p *publisher.Process) string {
	if p.ExecutablePath != "" {
		return p.ExecutablePath
	}
	return p.ExecutableName
}

// The methods below hold c.mu.

func (c *Catalog) originFor(p *publisher.Process) *origin {
	u := c.owners[p.Owner]
	if u == nil {
		u = &owner{uid: p.Owner, at: -1, origins: map[string]*origin{}, byExe: newExeRanking()}
		c.owners[p.Owner] = u
	}
	k := exeOf(p)
	o := u.origins[k]
	if o == nil {
		o = &origin{owner: u, exe: k, at: -1}
		u.origins[k] = o
	}
	return o
}

// queueOrigin adds the exit e to o.
func (c *Catalog) queueOrigin(o *origin, e exitEntry) {
	o.q = append(o.q, e)
	o.n++
	o.owner.n++
	if o.at < 0 {
		o.owner.byExe.add(o)
	} else {
		o.owner.byExe.fix(o)
	}
	c.rankOwner(o.owner)
	if len(o.q) > 2*o.n+16 { // mostly stale: keep what is still retained
		live := o.q[:0]
		for _, x := range o.q {
			if c.isRetained(o, x) {
				live = append(live, x)
			}
		}
		clear(o.q[len(live):])
		o.q = live
		o.owner.byExe.fix(o)
		c.byRetained.fix(o.owner)
	}
}

func (c *Catalog) rankOwner(u *owner) {
	if u.at < 0 {
		c.byRetained.add(u)
	} else {
		c.byRetained.fix(u)
	}
}

func (c *Catalog) isRetained(o *origin, e exitEntry) bool {
	for _, g := range c.exited[e.id.PID] {
		if g.p.ID == e.id && g.exitedAt == e.exitedAt {
			return g.origin == o
		}
	}
	return false
}

// leaveOrigin: one of o's exits is no longer retained.
func (c *Catalog) leaveOrigin(o *origin) {
	u := o.owner
	o.n--
	u.n--
	if o.n == 0 {
		u.byExe.remove(o)
		delete(u.origins, o.exe)
	} else {
		for len(o.q) > 0 && !c.isRetained(o, o.q[0]) {
			o.q = o.q[1:]
		}
		u.byExe.fix(o)
	}
	if u.n == 0 {
		c.byRetained.remove(u)
		delete(c.owners, u.uid)
		return
	}
	c.byRetained.fix(u)
}

// dropBiggestOrigin forgets the oldest exit of the executable holding the
// most of the owner holding the most; false if none could be.
func (c *Catalog) dropBiggestOrigin() bool {
	u := c.byRetained.first()
	if u == nil {
		return false
	}
	o := u.byExe.first()
	for len(o.q) > 0 {
		e := o.q[0]
		o.q = o.q[1:]
		if c.dropExited(e) {
			c.evictions.EvictedRetained++
			return true
		}
	}
	return false
}

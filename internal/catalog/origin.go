package catalog

import "github.com/otelctx/otelctx/internal/scan"

// origin is the retained exits of one executable. At the retention bound
// the origin holding the most exits gives up its oldest, so one
// executable's churn of short-lived publishers evicts its own exits, not
// another's whose late profiles still arrive.
type origin struct {
	key string
	// q: the exits in the order they were retired, oldest first; entries
	// of exits already dropped another way are stale and skipped.
	q  []exitEntry
	n  int
	at int // position in Catalog.byRetained
}

func newRetainedRanking() ranking[*origin] {
	return ranking[*origin]{
		before: func(a, b *origin) bool {
			if a.n != b.n {
				return a.n > b.n
			}
			return len(a.q) > 0 && len(b.q) > 0 && a.q[0].exitedAt < b.q[0].exitedAt // among equals, the oldest exit first
		},
		slot: func(o *origin) *int { return &o.at },
	}
}

// originKey: the observed executable (a publisher cannot choose another's).
func originKey(p *scan.Process) string {
	if p.ExecutablePath != "" {
		return p.ExecutablePath
	}
	return p.ExecutableName
}

// The methods below hold c.mu.

func (c *Catalog) originFor(p *scan.Process) *origin {
	k := originKey(p)
	o := c.origins[k]
	if o == nil {
		o = &origin{key: k, at: -1}
		c.origins[k] = o
	}
	return o
}

// queueOrigin adds the exit e to o.
func (c *Catalog) queueOrigin(o *origin, e exitEntry) {
	o.q = append(o.q, e)
	o.n++
	if o.at < 0 {
		c.byRetained.add(o)
	} else {
		c.byRetained.fix(o)
	}
	if len(o.q) > 2*o.n+16 { // mostly stale: keep what is still retained
		live := o.q[:0]
		for _, x := range o.q {
			if c.isRetained(o, x) {
				live = append(live, x)
			}
		}
		clear(o.q[len(live):])
		o.q = live
		c.byRetained.fix(o)
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
	o.n--
	if o.n == 0 {
		c.byRetained.remove(o)
		delete(c.origins, o.key)
		return
	}
	for len(o.q) > 0 && !c.isRetained(o, o.q[0]) {
		o.q = o.q[1:]
	}
	c.byRetained.fix(o)
}

// dropBiggestOrigin forgets the oldest exit of the origin holding the most.
func (c *Catalog) dropBiggestOrigin() {
	o := c.byRetained.first()
	if o == nil {
		return
	}
	for len(o.q) > 0 {
		e := o.q[0]
		o.q = o.q[1:]
		if c.dropExited(e) {
			c.evictions.EvictedRetained++
			return
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"slices"
	"strconv"
	"strings"

	"github.com/otelctx/otelctx/internal/publisher"
)

// Run is an Observation in Unix ns, so a per-sample join builds no
// time.Time; Exact: taken at a profiler's sample moment.
type Run struct {
	Record                *ThreadRecord
	First, Last           int64
	FirstExact, LastExact bool
}

// AppendRuns appends the runs a join of samples in [from, to] may need: the
// one in effect at from, later ones up to to, and the first after to (an
// observation just after a sample may vouch for it).
func (c *Catalog) AppendRuns(dst []Run, id publisher.ProcessID, tid int, from, to int64) []Run {
	c.mu.RLock()
	defer c.mu.RUnlock()
	h := c.threads[id].thread(tid)
	if h == nil {
		return dst
	}
	n := h.len()
	for i := max(h.after(from)-1, 0); i < n; i++ {
		e := h.at(i)
		dst = append(dst, Run{Record: e.rec, First: e.first, Last: e.last, FirstExact: e.firstExact, LastExact: e.lastExact})
		if e.first > to {
			break
		}
	}
	return dst
}

type Attribute struct{ Key, Value string }

// SortedAttributes is built once per record and shared by equal ones, so a
// join walks a short slice and resolves each set once (keyed by its first element).
func (r *ThreadRecord) SortedAttributes() []Attribute { return r.sorted }

// maxAttrSets: past it the table starts over; typical services have a few
// dozen sets (routes × methods).
const maxAttrSets = 4096

// prepare runs with c.mu held, before the record is visible.
func (c *Catalog) prepare(r *ThreadRecord) {
	if r == nil || r.sorted != nil || len(r.Attributes) == 0 {
		return
	}
	s := make([]Attribute, 0, len(r.Attributes))
	for k, v := range r.Attributes {
		s = append(s, Attribute{k, v})
	}
	slices.SortFunc(s, func(a, b Attribute) int { return strings.Compare(a.Key, b.Key) })
	var key strings.Builder
	for _, a := range s {
		// Lengths first: keys and values may hold any byte.
		key.WriteString(strconv.Itoa(len(a.Key)))
		key.WriteByte(':')
		key.WriteString(a.Key)
		key.WriteString(strconv.Itoa(len(a.Value)))
		key.WriteByte(':')
		key.WriteString(a.Value)
	}
	if shared, ok := c.attrSets[key.String()]; ok {
		r.sorted = shared
		return
	}
	if len(c.attrSets) >= maxAttrSets {
		clear(c.attrSets)
	}
	c.attrSets[key.String()] = s
	r.sorted = s
}

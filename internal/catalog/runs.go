package catalog

import (
	"slices"
	"strconv"
	"strings"

	"github.com/otelctx/otelctx/internal/scan"
)

// Run is a run of identical observations with its bounds in Unix
// nanoseconds: what a per-sample join needs, without building a time.Time
// per bound. FirstExact / LastExact: the observation at First / Last was
// taken at a profiler's sample moment.
type Run struct {
	// Record is nil when the thread had no (valid) record.
	Record                *ThreadRecord
	First, Last           int64
	FirstExact, LastExact bool
}

// AppendRuns appends to dst, oldest first, the runs of thread tid of the
// process id that a join of samples taken in [from, to] (Unix ns) may
// need: the run in effect at from (the latest that started at or before
// it), every later run that started at or before to, and the first run
// after to (an observation just after a sample may vouch for it). It
// returns dst. A caller that joins many samples per message copies only
// the window its samples need, into one reused slice.
func (c *Catalog) AppendRuns(dst []Run, id scan.ProcessID, tid int, from, to int64) []Run {
	c.mu.RLock()
	defer c.mu.RUnlock()
	h, ok := c.threads[id][tid]
	if !ok {
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

// Attribute is one named attribute of a thread record.
type Attribute struct{ Key, Value string }

// SortedAttributes returns the record's Attributes sorted by key, or nil
// when it has none. The catalog builds it once, when the record enters a
// history, and records with the same attributes share one slice, so that a
// join walks a short slice instead of a map, and resolves each distinct
// set of attributes once per message (keyed by the slice's first element).
func (r *ThreadRecord) SortedAttributes() []Attribute { return r.sorted }

// maxAttrSets bounds the distinct attribute sets the catalog shares; past
// it the table starts over (records keep their slices, later ones stop
// sharing with them). Records are at most 640 bytes, so the table holds at
// most a few MiB that no record uses any more; typical services have a few
// dozen sets (routes × methods).
const maxAttrSets = 4096

// prepare builds the record's sorted attributes, shared with the records
// that have the same; c.mu is held and the record is not yet visible to
// readers (or already prepared).
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

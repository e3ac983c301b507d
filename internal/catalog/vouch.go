// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import "slices"

// Miss says why a thread's history cannot vouch for a record at a moment.
type Miss uint8

const (
	Vouched       Miss = iota
	UnknownThread      // nothing observed of the thread in the window
	NoSpan             // the thread had no record then
	Stale              // not bracketed, and no exact observation within the match window
	Ambiguous          // exact observations of two records about as near
)

// Cursor finds the run in effect at a moment in one thread's runs (in time
// order, as AppendRuns gives them). It remembers the previous answer:
// samples of a thread come in time order, so the next one is usually in
// the same run or the next.
type Cursor struct {
	runs []Run
	cur  int
}

// NewCursor starts at the last run: a report's samples are mostly recent.
func NewCursor(runs []Run) Cursor { return Cursor{runs: runs, cur: max(0, len(runs)-1)} }

// RunAt returns the index (in the runs given to NewCursor) of the run whose record the thread had
// at t (Unix ns), or -1 and why none can be vouched for. A run vouches for
// t between its first and last observation. Outside every run, only an
// exact observation (taken at a profiler's sample moment) within window
// does: the nearest, unless one of another record is less than twice as
// far. Observations on our own clock never vouch outside their run.
func (c *Cursor) RunAt(t, window int64) (int, Miss) {
	if len(c.runs) == 0 {
		return -1, UnknownThread
	}
	if t < 0 {
		// A timestamp past 2262 (uint64 wrapped): distances from it overflow.
		return -1, Stale
	}
	i := c.runBefore(t)
	if i >= 0 && t <= c.runs[i].Last {
		return c.use(i)
	}
	best, miss := nearestExact(c.runs, i, t, window)
	if best < 0 {
		return -1, miss
	}
	return c.use(best)
}

func (c *Cursor) use(i int) (int, Miss) {
	if c.runs[i].Record == nil {
		return -1, NoSpan
	}
	return i, Vouched
}

// runBefore returns the index of the last run that started at or before t
// (-1: none).
func (c *Cursor) runBefore(t int64) int {
	runs := c.runs
	in := func(i int) bool { return runs[i].First <= t && (i+1 == len(runs) || runs[i+1].First > t) }
	if in(c.cur) {
		return c.cur
	}
	if c.cur+1 < len(runs) && in(c.cur+1) {
		c.cur++
		return c.cur
	}
	i, _ := slices.BinarySearchFunc(runs, t, func(r Run, t int64) int {
		if r.First <= t {
			return -1
		}
		return 1
	})
	i--
	c.cur = max(i, 0)
	return i
}

// nearestExact returns the run of the exact observation nearest to t within
// w (i: the last run that started at or before t, -1 if none), or -1 and
// Stale (none within w) or Ambiguous.
func nearestExact(runs []Run, i int, t, w int64) (int, Miss) {
	best, bestD, otherD := -1, int64(0), int64(-1)
	consider := func(j int, d int64) {
		switch {
		case best < 0:
			best, bestD = j, d
		case d < bestD:
			if !SameContent(runs[j].Record, runs[best].Record) {
				otherD = bestD
			}
			best, bestD = j, d
		case !SameContent(runs[j].Record, runs[best].Record) && (otherD < 0 || d < otherD):
			otherD = d
		}
	}
	for j := i; j >= 0 && t-runs[j].Last <= w; j-- {
		if runs[j].LastExact {
			consider(j, t-runs[j].Last)
		}
		if runs[j].FirstExact && t-runs[j].First <= w {
			consider(j, t-runs[j].First)
		}
	}
	for j := i + 1; j < len(runs) && runs[j].First-t <= w; j++ {
		if runs[j].FirstExact {
			consider(j, runs[j].First-t)
		}
		if runs[j].LastExact && runs[j].Last-t <= w {
			consider(j, runs[j].Last-t)
		}
	}
	switch {
	case best < 0:
		return -1, Stale
	case otherD >= 0 && otherD < 2*bestD:
		return -1, Ambiguous
	}
	return best, Vouched
}

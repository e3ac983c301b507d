// SPDX-License-Identifier: Apache-2.0

package cputimetruth

import (
	"cmp"
	"slices"
)

// Request is one request of a service's truth on one clock (ns): the
// window in which the service measured its CPU time, and the endpoint its
// thread context carries meanwhile.
type Request struct {
	Start, End int64
	Endpoint   string
	SpanID     string // the span whose record carries the endpoint
	Ignored    bool   // a warm-up request: not judged inside
}

// Endpoints judges the endpoint each sample of a service's request thread
// carried against the requests. Inside a request (more than Margin from
// its edges) a sample carries that request's endpoint or none (a join that
// saw no record); outside every request it carries none, or the endpoint
// of the request that ended last before it (its tail: the thread ran on
// after the service read the request's end, its tracer finishing the
// span, and may have been preempted there), or within Margin before a
// request that request's, or the endpoint of an earlier request whose
// span it is linked to (a continuation: work the request scheduled, e.g.
// a timer set while it ran, runs in its async context, and dd-trace
// attributes it to the request on purpose). Anything else is Wrong
// (inside) or Stray (outside): a sample counted under another endpoint
// than its own.
type Endpoints struct {
	Margin int64
	reqs   []Request
	bySpan map[string]Request

	Inside, InsideNone int // inside a judged request: its endpoint, none
	Wrong              int // inside a request: another endpoint
	Outside, Tail      int // outside requests: none, the previous request's endpoint
	Continued          int // outside requests: the endpoint of the earlier request it is linked to
	Stray              int // outside requests: another endpoint
}

// NewEndpoints sorts a copy of reqs.
func NewEndpoints(reqs []Request, margin int64) *Endpoints {
	reqs = slices.Clone(reqs)
	slices.SortFunc(reqs, func(a, b Request) int { return cmp.Compare(a.Start, b.Start) })
	bySpan := make(map[string]Request, len(reqs))
	for _, r := range reqs {
		bySpan[r.SpanID] = r
	}
	return &Endpoints{Margin: margin, reqs: reqs, bySpan: bySpan}
}

// Add judges one sample taken at at carrying endpoint ("" for none),
// linked to the span link (hex, "" for none).
func (e *Endpoints) Add(at int64, endpoint, link string) {
	// i: the first request starting after at.
	i, _ := slices.BinarySearchFunc(e.reqs, at, func(r Request, t int64) int { return cmp.Compare(r.Start, t) })
	if i > 0 && at <= e.reqs[i-1].End {
		r := e.reqs[i-1]
		switch {
		case at < r.Start+e.Margin || at+e.Margin > r.End, r.Ignored: // an edge; a warm-up
		case endpoint == r.Endpoint:
			e.Inside++
		case endpoint == "":
			e.InsideNone++
		default:
			e.Wrong++
		}
		return
	}
	switch {
	case endpoint == "":
		e.Outside++
	case i > 0 && endpoint == e.reqs[i-1].Endpoint:
		e.Tail++
	case i < len(e.reqs) && at+e.Margin >= e.reqs[i].Start && endpoint == e.reqs[i].Endpoint:
	case link != "" && e.bySpan[link].Endpoint == endpoint && e.bySpan[link].End < at:
		e.Continued++
	default:
		e.Stray++
	}
}

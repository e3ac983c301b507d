// SPDX-License-Identifier: Apache-2.0

// Package cputimetruth holds the rules by which CPU time measured from
// profiles (the cputime connector's metric and span records) is held
// against a publisher's ground truth (each span's route and the thread's
// own CPU time inside it): the stand-in profiler's test in make test and
// the real profiler's measurement in make e2e-profiler score alike.
package cputimetruth

import (
	"fmt"
	"maps"
	"math"
	"slices"
)

// RouteShareTolerance: each route's share of the routes' CPU time must be
// within 2 % (relative) of its true share.
const RouteShareTolerance = 0.02

// SpanMinNs: spans of at least this much CPU time are held to SpanBound.
const SpanMinNs = 100_000_000

// SpanBound is the sampling error a span's CPU time must stay within (ns):
// a profiler sampling a thread's CPU time every period P counts a span of
// CPU time T as n·P, n within 3 standard deviations of a Poisson count of
// mean T/P, plus one period for the span's two ends. A periodic timer on
// a thread that runs without a break does far better (±1 sample); this
// bound also holds when the thread is preempted and migrates.
func SpanBound(trueNs, periodNs float64) float64 {
	return (3*math.Sqrt(trueNs/periodNs) + 1) * periodNs
}

// SpanFamilyZ is how many standard deviations SpanFamilyBound allows each
// of n spans held together: the z at which n two-sided tails add up to one
// span's 3σ tail (0.27 %, Bonferroni), so that n spans are no likelier to
// miss by sampling alone than one span at SpanBound (3σ for 1 span, 4.24
// for 120, 4.73 for 1,218). At 3σ each, 1,218 spans of 100–150 ms would
// miss by sampling alone 92 % of the time.
func SpanFamilyZ(n int) float64 {
	return math.Sqrt2 * math.Erfcinv(math.Erfc(3/math.Sqrt2)/float64(max(n, 1)))
}

// SpanFamilyBound is SpanBound for one of n spans held together.
func SpanFamilyBound(trueNs, periodNs float64, n int) float64 {
	return (SpanFamilyZ(n)*math.Sqrt(trueNs/periodNs) + 1) * periodNs
}

// Route is one route's CPU time, true and measured, and its shares of the
// routes' totals.
type Route struct {
	Name                string
	TrueS, GotS         float64 // seconds
	TrueShare, GotShare float64 // of all routes' seconds
}

// ShareDev is the measured share's relative deviation from the true one.
func (r Route) ShareDev() float64 { return r.GotShare/r.TrueShare - 1 }

// Within: the share is within RouteShareTolerance.
func (r Route) Within() bool { return math.Abs(r.ShareDev()) <= RouteShareTolerance }

func (r Route) String() string {
	return fmt.Sprintf("route %-10s true %.3f s (%.2f %%), measured %.3f s (%.2f %%): share off by %+.2f %%, CPU time off by %+.2f %%",
		r.Name, r.TrueS, 100*r.TrueShare, r.GotS, 100*r.GotShare, 100*r.ShareDev(), 100*(r.GotS/r.TrueS-1))
}

// Routes compares the true and the measured seconds by route (the true
// routes, by name); a measured route the truth lacks is not among them.
func Routes(trueS, gotS map[string]float64) []Route {
	var trueAll, gotAll float64
	for r, s := range trueS {
		trueAll += s
		gotAll += gotS[r]
	}
	var out []Route
	for _, r := range slices.Sorted(maps.Keys(trueS)) {
		out = append(out, Route{Name: r, TrueS: trueS[r], GotS: gotS[r], TrueShare: trueS[r] / trueAll, GotShare: gotS[r] / gotAll})
	}
	return out
}

// ShareSigma is the standard deviation of a share p's relative deviation
// when the routes' CPU time is n samples (multinomial: p̂ of n draws has
// relative standard deviation √((1−p)/(p·n)); n = the routes' true CPU
// time over the period, the Poisson model of SpanBound).
func ShareSigma(p, n float64) float64 {
	return math.Sqrt((1 - p) / (p * n))
}

// SamplesForShare is the fewest samples n of all routes at which a share
// p's relative deviation has 3 standard deviations within tol.
func SamplesForShare(p, tol float64) float64 {
	return 9 * (1 - p) / (p * tol * tol)
}

// ShareBound is the relative share deviation a route of a service whose
// requests all run on one thread (a Node.js event loop) may show: three
// standard deviations of its sampled share, p̂ of N samples (multinomial:
// √((1−p)/(p·N)) relative, N = the routes' true CPU time / P, the
// Poisson model of SpanBound), plus one sample per request: the CPU a
// request spends with the endpoint in its thread's record but outside the
// window the service measured (dd-trace finishing the span, microseconds),
// or a sample at the window's edges. requests is the route's; trueAllNs
// every route's CPU time.
func ShareBound(r Route, requests int, trueAllNs, periodNs float64) float64 {
	n := trueAllNs / periodNs
	return 3*ShareSigma(r.TrueShare, n) + float64(requests)/(r.TrueShare*n)
}

// WithinShareBound: the share is within ShareBound.
func (r Route) WithinShareBound(requests int, trueAllNs, periodNs float64) bool {
	return math.Abs(r.ShareDev()) <= ShareBound(r, requests, trueAllNs, periodNs)
}

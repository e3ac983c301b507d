// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"math"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/cputimetruth"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// nodeRoundsPerWorker: a node kind's default, × -workers rounds on its one
// event loop (19.2 s of CPU time at 2 workers; its goal,
// cputimetruth.ShareBound, follows the samples it gets).
const nodeRoundsPerWorker = 20

// mixRounds is the rounds of threadpub.RouteMix each worker runs: -rounds,
// or by default for threadpub the fewest at which the flat
// cputimetruth.RouteShareTolerance is three standard deviations of the
// smallest route's share at hz (203 at 997 Hz with 2 workers: 194 s of CPU
// time), and nodeRoundsPerWorker for a node kind.
func mixRounds(cfg *config, hz int, node bool) int {
	if cfg.rounds > 0 {
		return cfg.rounds
	}
	if node {
		return nodeRoundsPerWorker
	}
	perRound := float64(cfg.workers) * roundSeconds() * float64(hz) // samples
	n := cputimetruth.SamplesForShare(smallestShare(), cputimetruth.RouteShareTolerance)
	return int(math.Ceil(n / perRound))
}

// roundSeconds is one round's CPU time.
func roundSeconds() float64 {
	var d time.Duration
	for _, rb := range threadpub.RouteMix {
		d += rb.Busy
	}
	return d.Seconds()
}

// smallestShare is the smallest route's share of a round's CPU time.
func smallestShare() float64 {
	by := map[string]time.Duration{}
	for _, rb := range threadpub.RouteMix {
		by[rb.Route] += rb.Busy
	}
	p := 1.0
	for _, d := range by {
		p = min(p, d.Seconds()/roundSeconds())
	}
	return p
}

// shareSigma is a route's share's relative standard deviation in r (its
// true CPU time over the period, all routes).
func (r *cpuResult) shareSigma(rt cputimetruth.Route) float64 {
	return cputimetruth.ShareSigma(rt.TrueShare, r.trueAll*1e9/r.periodNs)
}

// metricExact: the routes' metric counts exactly the publisher's samples
// linked to its measured spans. Another process of the service running
// the same routes on the host (a make test beside the measurement) would
// add its samples to the metric, and the shares would no longer be this
// publisher's alone.
func (r *cpuResult) metricExact() bool {
	return math.Abs(r.gotAll*1e9/r.periodNs-float64(r.linked)) <= 1
}

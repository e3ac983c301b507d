// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/cputimetruth"
)

// The environ goal on the counts of a real run (60 s, 997 Hz): met; and
// missed when the dd-trace service's samples take its environment's name,
// when the OTel SDK service falls below 99.9 %, or when another process
// carries a named one's values. The two named processes share
// service.namespace and deployment.environment.name: that alone misses
// nothing.
func TestEnvironGoal(t *testing.T) {
	run := func() *envResult {
		return &envResult{named: 1, bare: 2, otelSvc: 3, dd: 4, byPID: map[int64]*envCount{
			1: {samples: 6755, full: 6755, any: 6755, nodeAny: 6755},
			2: {samples: 7262},
			3: {samples: 6349, nodeFull: 6349, nodeAny: 6349, any: 6349},
			4: {samples: 7864, ddPub: 7864},
			5: {samples: 80674},
		}}
	}
	if r := run(); !r.goalMet() {
		t.Error("the run's counts miss the goal")
	}
	r := run()
	r.byPID[4].ddEnv, r.byPID[4].ddPub = 1, 7863
	if r.goalMet() {
		t.Error("a dd-trace sample under its environment's name meets the goal")
	}
	r = run()
	r.byPID[3].nodeFull = 6342
	if r.goalMet() {
		t.Error("the OTel SDK service at 99.89 % meets the goal")
	}
	r = run()
	r.byPID[5].nodeAny = 1
	if r.goalMet() {
		t.Error("another process with the OTel SDK service's values meets the goal")
	}
}

// The Node.js cputime goal on the figures of a real run: met with one
// request beyond its span bound (reported, not the goal); missed on a
// stray or wrong endpoint, a share beyond its bound, or an inexact record.
func TestCPUTimeNodeGoal(t *testing.T) {
	period := 1e9 / 997.0
	run := func() *cpuResult {
		r := &cpuResult{periodNs: period, spans: 120, spansWithin: 119, requests: map[string]int{"/a": 80, "/b": 40},
			endpoints: &cputimetruth.Endpoints{Inside: 20824, Outside: 536, Tail: 157}}
		r.routes = cputimetruth.Routes(map[string]float64{"/a": 10.85, "/b": 2.02}, map[string]float64{"/a": 11.97, "/b": 2.26})
		r.trueAll = 12.87
		return r
	}
	if r := run(); !r.goalMet() {
		t.Error("the run's figures miss the goal")
	}
	r := run()
	r.endpoints.Stray = 1
	if r.goalMet() {
		t.Error("a stray endpoint meets the goal")
	}
	r = run()
	r.endpoints.Wrong = 1
	if r.goalMet() {
		t.Error("a wrong endpoint meets the goal")
	}
	r = run()
	r.recordMismatch = 1
	if r.goalMet() {
		t.Error("an inexact span record meets the goal")
	}
	r = run()
	r.routes = cputimetruth.Routes(map[string]float64{"/a": 10.85, "/b": 2.02}, map[string]float64{"/a": 11.97, "/b": 3.0})
	if r.goalMet() {
		t.Error("/b's share 30 % over meets the goal")
	}
}

// The C publisher's goal on the figures of a 203-round run at 997 Hz: met
// with one of 1,218 spans beyond its own 3σ bound and within the bound for
// 1,218 spans held together; missed on a span beyond that, a metric
// counting samples that are not the publisher's, a missing
// record, or a route's share beyond the flat 2 % (/login at +2.3 %, which
// is 3.5 of its σ).
func TestCPUTimeThreadpubGoal(t *testing.T) {
	trueS := map[string]float64{"/checkout": 109.632, "/search": 40.610, "/cart": 24.366, "/login": 20.306}
	run := func() *cpuResult {
		r := &cpuResult{periodNs: float64(int64(time.Second) / 997), spans: 1218, spansWithin: 1217, spansWithinFamily: 1218, linked: 202984}
		r.routes = cputimetruth.Routes(trueS, map[string]float64{"/checkout": 114.389, "/search": 42.626, "/cart": 25.498, "/login": 21.081})
		for _, rt := range r.routes {
			r.gotAll += rt.GotS
		}
		return r
	}
	if r := run(); !r.goalMet() {
		t.Error("the run's figures miss the goal")
	}
	r := run()
	r.spansWithinFamily = 1217
	if r.goalMet() {
		t.Error("a span beyond the family bound meets the goal")
	}
	r = run()
	r.linked -= 5000 // another process's 5 s of the same routes in the metric
	if r.goalMet() {
		t.Error("a metric counting more than the publisher's samples meets the goal")
	}
	r = run()
	r.spansMissing = 1
	if r.goalMet() {
		t.Error("a span without a record meets the goal")
	}
	r = run()
	r.routes = cputimetruth.Routes(trueS, map[string]float64{"/checkout": 114.389, "/search": 42.626, "/cart": 25.498, "/login": 21.78})
	if r.goalMet() {
		t.Errorf("/login's share off by %+.2f %% meets the goal", 100*r.routes[2].ShareDev())
	}
}

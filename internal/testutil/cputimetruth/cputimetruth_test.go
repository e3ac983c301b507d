// SPDX-License-Identifier: Apache-2.0

package cputimetruth

import (
	"math"
	"testing"
)

// The bound at the spans the issue names: ±31 ms at 100 ms, ±38 ms at
// 150 ms for 997 Hz.
func TestSpanBound(t *testing.T) {
	p := 1e9 / 997
	for _, c := range []struct{ trueNs, wantMs float64 }{{100e6, 31.0}, {150e6, 37.9}} {
		if got := SpanBound(c.trueNs, p) / 1e6; math.Abs(got-c.wantMs) > 0.1 {
			t.Errorf("SpanBound(%.0f ms) = %.2f ms, want %.1f", c.trueNs/1e6, got, c.wantMs)
		}
	}
}

// Shares are of the true routes' totals; a measured route the truth lacks
// counts in neither; 2 % is relative to the true share.
func TestRoutes(t *testing.T) {
	rs := Routes(map[string]float64{"/a": 3, "/b": 1}, map[string]float64{"/a": 3.1, "/b": 1.0, "/warmup": 9})
	if len(rs) != 2 || rs[0].Name != "/a" || rs[1].Name != "/b" {
		t.Fatalf("routes %+v", rs)
	}
	if a := rs[0]; math.Abs(a.TrueShare-0.75) > 1e-9 || math.Abs(a.GotShare-3.1/4.1) > 1e-9 || !a.Within() {
		t.Errorf("/a: %+v (share dev %.4f)", a, a.ShareDev())
	}
	if b := rs[1]; b.Within() || math.Abs(b.ShareDev()-(1/4.1/0.25-1)) > 1e-9 {
		t.Errorf("/b: %+v, want beyond 2 %% (share dev %.4f)", b, b.ShareDev())
	}
}

// The Node.js bound at make e2e-profiler's default for it (40 rounds of
// threadpub.RouteMix on one thread, 997 Hz): /login (50 ms, 40 requests,
// 10.4 % of 19.2 s) 8.4 %, /checkout (150 and 120 ms, 80 requests,
// 56.25 %) 2.6 %.
func TestShareBound(t *testing.T) {
	p := 1e9 / 997
	all := 40 * 0.480 * 1e9
	for _, c := range []struct {
		share    float64
		requests int
		want     float64
	}{{0.05 / 0.48, 40, 0.0836}, {0.27 / 0.48, 80, 0.0261}} {
		if got := ShareBound(Route{TrueShare: c.share}, c.requests, all, p); math.Abs(got-c.want) > 0.0005 {
			t.Errorf("ShareBound(share %.4f, %d requests) = %.4f, want %.4f", c.share, c.requests, got, c.want)
		}
	}
}

// Samples against two requests: inside, at edges, a tail, and the wrong
// and stray endpoints Endpoints exists to catch.
func TestEndpoints(t *testing.T) {
	const ms = int64(1e6)
	e := NewEndpoints([]Request{{Start: 100 * ms, End: 200 * ms, Endpoint: "GET /b", SpanID: "b"}, {Start: 0, End: 50 * ms, Endpoint: "GET /a", SpanID: "a"}}, ms)
	for _, s := range []struct {
		at             int64
		endpoint, link string
	}{
		{10 * ms, "GET /a", "a"}, {20 * ms, "", ""}, {30 * ms, "GET /b", "b"}, // inside /a: right, none, wrong
		{49*ms + ms/2, "GET /b", "b"},                                        // at /a's edge: not judged
		{60 * ms, "GET /a", "a"}, {70 * ms, "", ""}, {80 * ms, "GET /b", ""}, // outside: tail, none, stray
		{100*ms - ms/2, "GET /b", "b"}, // just before /b: its own
		{300 * ms, "GET /a", ""},       // after /b: stray
		{300 * ms, "GET /a", "a"},      // after /b, linked to /a's span: a continuation of /a
		{300 * ms, "GET /a", "b"},      // linked to /b's span with /a's endpoint: stray
	} {
		e.Add(s.at, s.endpoint, s.link)
	}
	if e.Inside != 1 || e.InsideNone != 1 || e.Wrong != 1 || e.Tail != 1 || e.Outside != 1 || e.Continued != 1 || e.Stray != 3 {
		t.Errorf("%+v", *e)
	}
}

// The C publisher's flat 2 % is three standard deviations of /login's
// share (50 of every 480 ms) from 193,500 samples on: 194 s of CPU time at
// 997 Hz. At 20 rounds of two workers (19,142 samples) its σ is 2.12 %.
func TestShareSigma(t *testing.T) {
	p := 0.05 / 0.48
	if n := SamplesForShare(p, 0.02); math.Abs(n-193500) > 1 {
		t.Errorf("SamplesForShare(%.4f, 2 %%) = %.0f, want 193500", p, n)
	}
	if s := 3 * ShareSigma(p, SamplesForShare(p, 0.02)); math.Abs(s-0.02) > 1e-12 {
		t.Errorf("3σ at SamplesForShare = %.6f, want 0.02", s)
	}
	if s := ShareSigma(p, 20*2*0.48*997); math.Abs(s-0.0212) > 0.00005 {
		t.Errorf("σ at 20 rounds = %.5f, want 0.0212", s)
	}
}

// One span's family bound is SpanBound; 120 and 1,218 spans (20 and 203
// rounds of two workers) get 4.24σ and 4.73σ: 48 samples at 100 ms.
func TestSpanFamilyBound(t *testing.T) {
	p := 1e9 / 997
	if a, b := SpanFamilyBound(100e6, p, 1), SpanBound(100e6, p); math.Abs(a-b) > 1 {
		t.Errorf("one span: %.0f ns, SpanBound %.0f ns", a, b)
	}
	for _, c := range []struct {
		n    int
		want float64
	}{{120, 4.24}, {1218, 4.73}} {
		if z := SpanFamilyZ(c.n); math.Abs(z-c.want) > 0.01 {
			t.Errorf("SpanFamilyZ(%d) = %.3f, want %.2f", c.n, z, c.want)
		}
	}
	if got := SpanFamilyBound(100e6, p, 1218) / p; math.Abs(got-48.3) > 0.1 {
		t.Errorf("1,218 spans: bound at 100 ms %.1f samples, want 48.3", got)
	}
}

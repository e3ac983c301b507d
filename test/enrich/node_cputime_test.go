// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich_test

import (
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/testutil/cputimetruth"
	"github.com/otelctx/otelctx/internal/testutil/ebpfwatch"
	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/nodepub"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// endpointKey is the thread-context key dd-trace writes a request's
// endpoint under ("GET /route"), one of the connector's default dimensions.
const endpointKey = "datadog.trace_endpoint"

// nodeRounds: rounds of threadpub.RouteMix the stand-in test sends (4.8 s
// of CPU time, 50 requests: /login's bound ±14 %, /checkout's ±4.3 %).
const nodeRounds = 10

// TestCPUTimeNodeEndpoints: a Node.js HTTP service (Node 24) traced by
// dd-trace serves requests on four routes, each using a known amount of
// its thread's CPU time (the service measures it: process.threadCpuUsage);
// a stand-in profiler at 997 Hz samples the host; every sample of the
// service, shaped as the OTel eBPF profiler sends them, goes through
// ctx_enrich (the extension following the profiler) and the cpu_time
// connector's defaults. The metric's points by dd-trace's endpoint
// (datadog.trace_endpoint) count exactly the profiler's samples of the
// requests of that route (±2 per request: its edges); no sample inside a
// request carries another route's endpoint, none outside requests any but
// the request's that just ended or the earlier request's its link names
// (cputimetruth.Endpoints); and each
// route's share of the CPU time is within cputimetruth.ShareBound of the
// share the service measured (a starved run is measured again).
func TestCPUTimeNodeEndpoints(t *testing.T) {
	samplertest.Require(t)
	node := nodepub.Node(t, 24)
	testenv.MeasureFloors(t, func(t *testing.T) []string { return cpuTimeNode(t, node) })
}

func cpuTimeNode(t *testing.T, node string) (misses []string) {
	svc := nodepub.StartRoutes(t, node)
	name := "otelctx_test_nr" // 15 bytes: the kernel keeps it whole
	rcvID, cat := ebpfwatch.StartWith(t, svc.PID, func(cfg *processctxextension.Config) {
		cfg.ThreadContext.FollowPrograms = []string{name}
	})
	prof, err := fakeprof.Start(cpuHz, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prof.Close() })
	// Warm-up requests until the extension has observed the event loop at
	// the profiler's samples (it follows the profiler): a route the
	// scoring ignores.
	from := time.Now().UnixNano()
	testenv.EventuallyWithin(t, time.Minute, "an observation of the event loop at the profiler's samples", func() bool {
		svc.Get(t, "/warmup", 20*time.Millisecond)
		return catalogExact(cat, svc.PID, svc.PID, from)
	})
	for range nodeRounds {
		for _, r := range threadpub.RouteMix {
			svc.Get(t, r.Route, r.Busy)
		}
	}
	truth := svc.Done(t)
	if err := prof.Stop(); err != nil {
		t.Fatal(err)
	}
	var spans []threadpub.Span // the measured requests
	for _, s := range truth.Spans {
		if s.Route != "/warmup" {
			spans = append(spans, s)
		}
	}
	if len(spans) != nodeRounds*len(threadpub.RouteMix) {
		t.Fatalf("%d requests in the truth, want %d", len(spans), nodeRounds*len(threadpub.RouteMix))
	}

	// Every sample of the service's threads (the event loop and V8's and
	// libuv's own, which carry no record).
	period := int64(time.Second) / cpuHz
	byTID := map[int][]int64{}
	ticksRoute := map[string]int{} // the event loop's samples inside the route's requests
	for _, s := range prof.Samples() {
		if s.PID != svc.PID {
			continue
		}
		byTID[s.TID] = append(byTID[s.TID], prof.WallTime(s.BootNs).UnixNano())
		if s.TID != svc.PID {
			continue
		}
		if sp, ok := requestAt(truth.Spans, s.BootNs, 0); ok {
			ticksRoute[sp.Route]++
		}
	}
	// The executable as the profiler reports it (/proc/PID/exe: _build/node
	// may be a link).
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", svc.PID))
	if err != nil {
		t.Fatal(err)
	}
	// Joined once the service has exited, as a profiler's last report is.
	svc.Kill()
	testenv.Eventually(t, "the extension to notice the service's exit", func() bool {
		_, live := cat.Process(svc.PID)
		return !live
	})
	enriched := enrich(t, rcvID, cpuProfiles(svc.PID, exe, "node", byTID, period))
	bootOf := func(ts uint64) uint64 { return uint64(int64(ts) - prof.WallTime(0).UnixNano()) }
	ec := sampleEndpoints(t, enriched, truth.Spans, svc.PID, bootOf)
	t.Logf("the event loop's sample timestamps: inside requests (1 ms from their edges) %d with their endpoint, %d with none; outside requests %d with none, %d with the previous request's (its tail), %d with an earlier request's it is linked to (a continuation)",
		ec.Inside, ec.InsideNone, ec.Outside, ec.Tail, ec.Continued)
	if ec.Wrong > 0 || ec.Stray > 0 {
		t.Errorf("%d samples inside a request carried another route's endpoint, %d outside every request another endpoint than the previous request's", ec.Wrong, ec.Stray)
	}

	md, _ := cpuTime(t, enriched)
	trueRoute, gotRoute, requests := map[string]float64{}, map[string]float64{}, map[string]int{}
	for _, s := range spans {
		trueRoute[s.Route] += float64(s.CPUNs) / 1e9
		requests[s.Route]++
	}
	for _, rm := range md.ResourceMetrics().All() {
		for _, dp := range rm.ScopeMetrics().At(0).Metrics().At(0).Sum().DataPoints().All() {
			e, ok := dp.Attributes().Get(endpointKey)
			if !ok {
				continue
			}
			route, ok := strings.CutPrefix(e.Str(), "GET ")
			if _, ours := trueRoute[route]; !ok || (!ours && route != "/warmup") {
				t.Errorf("a point of endpoint %q, which the service did not serve", e.Str())
				continue
			}
			gotRoute[route] += dp.DoubleValue()
		}
	}
	var trueAll float64
	for _, s := range trueRoute {
		trueAll += s * 1e9
	}
	for _, rs := range cputimetruth.Routes(trueRoute, gotRoute) {
		r := rs.Name
		bound := cputimetruth.ShareBound(rs, requests[r], trueAll, float64(period))
		t.Logf("%s; bound ±%.2f %%", rs, 100*bound)
		if got := gotRoute[r] * 1e9 / float64(period); math.Abs(got-float64(ticksRoute[r])) > float64(2*requests[r]) {
			t.Errorf("route %s: the metric counts %.0f samples, the profiler took %d inside its %d requests", r, got, ticksRoute[r], requests[r])
		}
		if !rs.WithinShareBound(requests[r], trueAll, float64(period)) {
			misses = append(misses, fmt.Sprintf("route %s: share %.2f %% vs true %.2f %% (%+.2f %%, beyond ±%.2f %%)", r, 100*rs.GotShare, 100*rs.TrueShare, 100*rs.ShareDev(), 100*bound))
		}
	}
	return misses
}

// requestAt is the request whose window holds bootNs, at least margin
// inside it.
func requestAt(spans []threadpub.Span, bootNs, margin uint64) (threadpub.Span, bool) {
	for _, s := range spans {
		if bootNs >= s.BootStart+margin && bootNs+margin <= s.BootEnd {
			return s, true
		}
	}
	return threadpub.Span{}, false
}

// sampleEndpoints judges the endpoint of each of the event loop's enriched
// sample timestamps against the requests (cputimetruth.Endpoints).
func sampleEndpoints(t *testing.T, pd pprofile.Profiles, spans []threadpub.Span, pid int, bootOf func(uint64) uint64) *cputimetruth.Endpoints {
	t.Helper()
	reqs := make([]cputimetruth.Request, len(spans))
	for i, s := range spans {
		reqs[i] = cputimetruth.Request{Start: int64(s.BootStart), End: int64(s.BootEnd), Endpoint: "GET " + s.Route, SpanID: s.SpanID, Ignored: s.Route == "/warmup"}
	}
	e := cputimetruth.NewEndpoints(reqs, int64(time.Millisecond))
	dict := pd.Dictionary()
	for _, rp := range pd.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, pr := range sp.Profiles().All() {
				for _, s := range pr.Samples().All() {
					attrs, err := pprofile.FromAttributeIndices(dict.AttributeTable(), s, dict)
					if err != nil {
						t.Fatal(err)
					}
					if tid, _ := attrs.Get("thread.id"); tid.Int() != int64(pid) {
						continue
					}
					endpoint := ""
					if v, ok := attrs.Get(endpointKey); ok {
						endpoint = v.Str()
					}
					link := ""
					if i := int(s.LinkIndex()); i > 0 && i < dict.LinkTable().Len() {
						id := dict.LinkTable().At(i).SpanID()
						link = hex.EncodeToString(id[:])
					}
					for _, ts := range s.TimestampsUnixNano().All() {
						e.Add(int64(bootOf(ts)), endpoint, link)
					}
				}
			}
		}
	}
	return e
}

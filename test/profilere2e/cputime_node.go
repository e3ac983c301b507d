// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/cputimetruth"
	"github.com/otelctx/otelctx/internal/testutil/distrun"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// The Node.js service of the cputime mode (testdata/node/routes.js): its
// dd-trace service name, and the key dd-trace's thread context carries its
// endpoint under ("GET /route", a default dimension of the connector).
const (
	routesService = "otelctx-routes"
	endpointKey   = "datadog.trace_endpoint"
	warmupRoute   = "/warmup"
)

// routesClient sends requests to routes.js.
type routesClient struct {
	port   string
	client *http.Client
}

// get sends one request and returns the answer's fields.
func (c *routesClient) get(pathQuery string) ([]string, error) {
	resp, err := c.client.Get("http://127.0.0.1:" + c.port + pathQuery)
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("routes.js: GET %s: %s: %s", pathQuery, resp.Status, body)
	}
	return strings.Fields(string(body)), nil
}

// measureCPUTimeNode: a Node.js HTTP service traced by dd-trace
// (routes.js) serves requests of threadpub.RouteMix's routes, each using a
// known amount of its event loop's CPU time, -rounds × -workers rounds
// one after the other (the CPU time threadpub's workers run), while the
// real profiler samples the host; the enriched profiles go through the
// cputime connector in the distribution, and each endpoint's share of the
// CPU time is held against the service's own measurement within
// cputimetruth.ShareBound, every sample of the event loop against the
// endpoint it may carry (cputimetruth.Endpoints), and each span record
// against the samples linked to its span.
func measureCPUTimeNode(ctx context.Context, cfg *config, hz int, k kind, dir string) (_ *cpuResult, err error) {
	ps := &procs{}
	defer ps.stopAll()
	profPath := filepath.Join(dir, "profiles.jsonl")
	ct := &distrun.CPUTime{FlushInterval: 5 * time.Second, Metrics: filepath.Join(dir, "cputime-metrics.jsonl"), Logs: filepath.Join(dir, "cputime-logs.jsonl")}
	colCfg := distrun.Config{Profiles: &distrun.Profiles{GRPC: otlpEndpoint, Path: profPath, CPUTime: ct}}.YAML()
	truthPath := filepath.Join(dir, "truth-requests")
	svc := k
	svc.service, svc.requests = routesService, true
	svc.start = func(ps *procs, logPath string) (*publisher, error) {
		cmd := exec.Command(k.node, filepath.Join(k.root, "testdata", "node", "routes.js"), truthPath)
		cmd.Env = k.nodeEnv()
		return startPublisher(ps, cmd, logPath)
	}
	h, err := startHost(ctx, ps, cfg, hz, svc, dir, colCfg)
	if err != nil {
		return nil, err
	}
	if len(h.pub.ready) != 1 {
		return nil, fmt.Errorf("routes.js: ready line without its port: %q", h.pub.ready)
	}
	c := &routesClient{port: h.pub.ready[0], client: &http.Client{Timeout: time.Minute}}
	var times result
	prof, err := startProfiler(ctx, ps, cfg, hz, dir, &times, h.logf)
	if err != nil {
		return nil, err
	}
	out := &output{path: profPath, pid: int64(h.pub.pid)}
	warm, err := warmUpNode(ctx, cfg, hz, h, prof, out, c)
	if err != nil {
		return nil, err
	}
	rounds := mixRounds(cfg, hz, true) * cfg.workers
	res := &cpuResult{hz: hz, hogs: cfg.hogsPerCore * runtime.NumCPU(), cpus: runtime.NumCPU(), workers: 1,
		spansPerWorker: rounds * len(threadpub.RouteMix), periodNs: float64(int64(time.Second) / int64(hz)),
		attach: times.profAttach.Sub(times.profStart), exemplars: map[string]int{}, badExemplars: map[string]int{},
		publisher: k.name + " (routes.js, dd-trace)", requests: map[string]int{}}
	truth, reqs, start, exitAt, err := runRequests(ctx, h, c, res, rounds, truthPath)
	if err != nil {
		return nil, err
	}
	evs, err := collect(ctx, cfg, h, prof, out, ct, truth, start, exitAt)
	if err != nil {
		return nil, err
	}
	if err := res.scoreNode(ct, truth, evs); err != nil {
		return nil, err
	}
	// Every sample of the event loop from the warm-up on, by its endpoint.
	res.endpoints = cputimetruth.NewEndpoints(reqs, int64(time.Millisecond))
	everything, _, _, _, _ := out.snapshot()
	for _, e := range everything {
		if e.tid == int64(h.pub.pid) && e.ts >= warm.UnixNano() {
			res.endpoints.Add(e.ts, e.endpoint, e.link)
		}
	}
	return res, nil
}

// warmUpNode (warmUp says why) sends requests of a route of their own
// until the profiler reports the service's CPU time whole: until the last
// two warm-up requests its reports cover each have samples within
// SpanBound of their CPU time. With Node the profiler's losses go on past
// its first samples of the process: in a run that stopped at the first
// samples, the first three measured requests of ≥ 100 ms had only 38–62 %
// of theirs (every sample it reported inside them carried their endpoint).
// It returns when the warm-up began.
func warmUpNode(ctx context.Context, cfg *config, hz int, h *host, prof *proc, out *output, c *routesClient) (time.Time, error) {
	if err := waitFor(ctx, "the profiler's first report", 4*cfg.reporterInterval+time.Minute, 200*time.Millisecond, func() (bool, error) {
		err := out.poll()
		_, lines, _, _, _ := out.snapshot()
		return lines > 0, err
	}, h.col, prof); err != nil {
		return time.Time{}, err
	}
	type window struct{ start, end, cpu int64 }
	var warmups []window
	period := float64(time.Second) / float64(hz)
	warm := time.Now()
	err := waitFor(ctx, "the profiler's reports of the service's CPU time whole", 4*cfg.reporterInterval+3*time.Minute, 200*time.Millisecond, func() (bool, error) {
		f, err := c.get(warmupRoute + "?ms=100")
		if err != nil {
			return false, err
		}
		var w window
		if len(f) != 4 || f[0] != "ok" {
			return false, fmt.Errorf("routes.js: warm-up answer %q", f)
		}
		if _, err := fmt.Sscan(strings.Join(f[1:], " "), &w.start, &w.end, &w.cpu); err != nil {
			return false, fmt.Errorf("routes.js: warm-up answer %q: %w", f, err)
		}
		warmups = append(warmups, w)
		if err := out.poll(); err != nil {
			return false, err
		}
		evs, _, _, maxEnd, _ := out.snapshot()
		whole := 0
		for i := len(warmups) - 1; i >= 0 && whole < 2; i-- {
			w := warmups[i]
			if w.end > maxEnd {
				continue // not reported yet
			}
			n := 0
			for _, e := range evs {
				if e.tid == int64(h.pub.pid) && e.ts >= w.start && e.ts <= w.end {
					n++
				}
			}
			if float64(w.cpu)-float64(n)*period > cputimetruth.SpanBound(float64(w.cpu), period) {
				return false, nil
			}
			whole++
		}
		return whole == 2, nil
	}, h.col, prof)
	if err != nil {
		return warm, err
	}
	h.logf("warm-up: %d requests of %s (100 ms each) until the profiler reported two whole, %.1f s", len(warmups), warmupRoute, time.Since(warm).Seconds())
	return warm, nil
}

// runRequests sends the measured requests one after the other, reads the
// truth (the measured requests; every request's window as judged by
// Endpoints) and makes the service exit.
func runRequests(ctx context.Context, h *host, c *routesClient, res *cpuResult, rounds int, truthPath string) (truth []threadpub.Span, reqs []cputimetruth.Request, start, exitAt time.Time, err error) {
	start = time.Now()
	h.logf("run: %d requests of %s, one after the other", res.spansPerWorker, threadpub.RouteSpec(threadpub.RouteMix))
	for range rounds {
		for _, r := range threadpub.RouteMix {
			if _, err := c.get(fmt.Sprintf("%s?ms=%d", r.Route, r.Busy.Milliseconds())); err != nil {
				return nil, nil, start, exitAt, err
			}
			res.requests[r.Route]++
		}
	}
	res.wall = time.Since(start)
	if _, err := c.get("/done"); err != nil {
		return nil, nil, start, exitAt, err
	}
	all, err := threadpub.ReadSwitchTruth(truthPath)
	if err != nil {
		return nil, nil, start, exitAt, err
	}
	for _, s := range all.Spans {
		reqs = append(reqs, cputimetruth.Request{Start: s.RealStart, End: s.RealEnd, Endpoint: "GET " + s.Route, SpanID: s.SpanID, Ignored: s.Route == warmupRoute})
		if s.Route != warmupRoute {
			truth = append(truth, s)
		}
	}
	if len(truth) != res.spansPerWorker {
		return nil, nil, start, exitAt, fmt.Errorf("%s: %d requests, want %d", truthPath, len(truth), res.spansPerWorker)
	}
	if exitAt, err = h.pub.exit(ctx); err != nil {
		return nil, nil, start, exitAt, err
	}
	h.logf("run over in %.1f s; service exited", res.wall.Seconds())
	return truth, reqs, start, exitAt, nil
}

// scoreNode reads the connector's metric by endpoint and its span records,
// and scores them against the truth.
func (r *cpuResult) scoreNode(ct *distrun.CPUTime, truth []threadpub.Span, evs []event) error {
	gotRoute, err := readDimensionMetric(ct.Metrics, routesService, endpointKey, func(v string) string {
		route, _ := strings.CutPrefix(v, "GET ")
		return route
	}, r)
	if err != nil {
		return err
	}
	for route := range gotRoute {
		if _, ok := r.requests[route]; !ok && route != warmupRoute {
			r.unknownPoints = append(r.unknownPoints, route)
		}
	}
	records, err := readSpanRecords(ct.Logs, routesService)
	if err != nil {
		return err
	}
	r.score(truth, gotRoute, records, evs)
	return nil
}

// withinGoal: the route's share within 2 % (threadpub's workers), or
// within cputimetruth.ShareBound (a service's requests on one thread).
func (r *cpuResult) withinGoal(rt cputimetruth.Route) (bool, float64) {
	if r.requests == nil {
		return rt.Within(), cputimetruth.RouteShareTolerance
	}
	return rt.WithinShareBound(r.requests[rt.Name], r.trueAll*1e9, r.periodNs), cputimetruth.ShareBound(rt, r.requests[rt.Name], r.trueAll*1e9, r.periodNs)
}

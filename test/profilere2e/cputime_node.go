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

// measureCPUTimeNode: a Node.js HTTP service traced by dd-trace
// (routes.js) serves requests of threadpub.RouteMix's routes, each using a
// known amount of its event loop's CPU time, -rounds × -workers rounds
// one after the other (the CPU time threadpub's workers run), while the
// real profiler samples the host; the enriched profiles go through the
// cputime connector in the distribution, and each endpoint's share of the
// CPU time is held against the service's own measurement within
// cputimetruth.ShareBound, each request of ≥ 100 ms against SpanBound,
// and every sample of the event loop against the endpoint it may carry
// (cputimetruth.Endpoints).
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
	pub := h.pub
	if len(pub.ready) != 1 {
		return nil, fmt.Errorf("routes.js: ready line without its port: %q", pub.ready)
	}
	client := &http.Client{Timeout: time.Minute}
	get := func(pathQuery string) error {
		resp, err := client.Get("http://127.0.0.1:" + pub.ready[0] + pathQuery)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("routes.js: GET %s: %s: %s", pathQuery, resp.Status, body)
		}
		return nil
	}
	var times result
	prof, err := startProfiler(ctx, ps, cfg, hz, dir, &times, h.logf)
	if err != nil {
		return nil, err
	}
	out := &output{path: profPath, pid: int64(pub.pid)}

	// Warm-up (warmUp says why): requests of a route of their own until the
	// profiler has reported samples of the service.
	if err := waitFor(ctx, "the profiler's first report", 4*cfg.reporterInterval+time.Minute, 200*time.Millisecond, func() (bool, error) {
		err := out.poll()
		_, lines, _, _, _ := out.snapshot()
		return lines > 0, err
	}, h.col, prof); err != nil {
		return nil, err
	}
	warm, warmRequests := time.Now(), 0
	if err := waitFor(ctx, "the profiler's first samples of the service", 4*cfg.reporterInterval+time.Minute, 200*time.Millisecond, func() (bool, error) {
		if err := get(warmupRoute + "?ms=100"); err != nil {
			return false, err
		}
		warmRequests++
		err := out.poll()
		evs, _, _, _, _ := out.snapshot()
		return len(evs) > 0, err
	}, h.col, prof); err != nil {
		return nil, err
	}
	h.logf("warm-up: %d requests of %s (100 ms each); samples of the service reported %.1f s after they began", warmRequests, warmupRoute, time.Since(warm).Seconds())

	rounds := cfg.rounds * cfg.workers
	res := &cpuResult{hz: hz, hogs: cfg.hogsPerCore * runtime.NumCPU(), cpus: runtime.NumCPU(), workers: 1,
		spansPerWorker: rounds * len(threadpub.RouteMix), periodNs: float64(int64(time.Second) / int64(hz)),
		attach: times.profAttach.Sub(times.profStart), exemplars: map[string]int{}, badExemplars: map[string]int{},
		publisher: k.name + " (routes.js, dd-trace)", requests: map[string]int{}}
	start := time.Now()
	h.logf("run: %d requests of %s, one after the other", res.spansPerWorker, threadpub.RouteSpec(threadpub.RouteMix))
	for range rounds {
		for _, r := range threadpub.RouteMix {
			if err := get(fmt.Sprintf("%s?ms=%d", r.Route, r.Busy.Milliseconds())); err != nil {
				return nil, err
			}
			res.requests[r.Route]++
		}
	}
	res.wall = time.Since(start)
	if err := get("/done"); err != nil {
		return nil, err
	}
	all, err := threadpub.ReadSwitchTruth(truthPath)
	if err != nil {
		return nil, err
	}
	var truth []threadpub.Span
	reqs := make([]cputimetruth.Request, 0, len(all.Spans))
	for _, s := range all.Spans {
		reqs = append(reqs, cputimetruth.Request{Start: s.RealStart, End: s.RealEnd, Endpoint: "GET " + s.Route, Ignored: s.Route == warmupRoute})
		if s.Route != warmupRoute {
			truth = append(truth, s)
		}
	}
	if len(truth) != res.spansPerWorker {
		return nil, fmt.Errorf("%s: %d requests, want %d", truthPath, len(truth), res.spansPerWorker)
	}
	exitAt, err := pub.exit(ctx)
	if err != nil {
		return nil, err
	}
	h.logf("run over in %.1f s; service exited", res.wall.Seconds())
	evs, err := collect(ctx, cfg, h, prof, out, ct, truth, start, exitAt)
	if err != nil {
		return nil, err
	}
	gotRoute, err := readDimensionMetric(ct.Metrics, routesService, endpointKey, func(v string) string {
		route, _ := strings.CutPrefix(v, "GET ")
		return route
	}, res)
	if err != nil {
		return nil, err
	}
	for route := range gotRoute {
		if _, ok := res.requests[route]; !ok && route != warmupRoute {
			res.unknownPoints = append(res.unknownPoints, route)
		}
	}
	records, err := readSpanRecords(ct.Logs, routesService)
	if err != nil {
		return nil, err
	}
	res.score(truth, gotRoute, records, evs)
	// Every sample of the event loop from the warm-up on, by its endpoint.
	res.endpoints = cputimetruth.NewEndpoints(reqs, int64(time.Millisecond))
	everything, _, _, _, _ := out.snapshot()
	for _, e := range everything {
		if e.tid == int64(pub.pid) && e.ts >= warm.UnixNano() {
			res.endpoints.Add(e.ts, e.endpoint)
		}
	}
	return res, nil
}

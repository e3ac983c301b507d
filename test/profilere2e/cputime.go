// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/otelctx/otelctx/connector/cputimeconnector"
	"github.com/otelctx/otelctx/internal/testutil/cputimetruth"
	"github.com/otelctx/otelctx/internal/testutil/distrun"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// routeKey is the sample attribute the threadpub workers' route reaches the
// connector's metric as (its default dimensions include it).
const routeKey = "http.route"

// cpuResult is one cputime measurement: the routes' and the spans' CPU
// time from the connector against the workers' own CPU clocks.
type cpuResult struct {
	hz, hogs, cpus, workers, spansPerWorker int
	periodNs                                float64
	wall, attach                            time.Duration
	routes                                  []cputimetruth.Route
	exemplars, badExemplars                 map[string]int      // by route
	spans, spansWithin, spansMissing        int                 // spans of at least cputimetruth.SpanMinNs; within SpanBound
	spansWithinFamily                       int                 // within SpanFamilyBound for r.spans spans: the goal
	worstSamples, worstOfBound              float64             // the largest span error, in samples and as a share of its SpanBound
	worstOfFamily                           float64             // the largest span error as a share of its SpanFamilyBound
	spanRelErr                              []float64           // each checked span's (measured - true) / true
	recordMismatch                          int                 // span records whose sample count differs from the samples ctxenrich linked to the span
	trueAll, gotAll                         float64             // seconds, every route
	linked, unlinked                        int                 // the publisher's sample timestamps in the enriched profiles
	exemplarIDs                             map[string][]string // span ids of the exemplars, by route
	// A service whose requests run on one thread (node kinds): its name,
	// its requests by route (ShareBound's), the points of endpoints it did
	// not serve, and the endpoints its samples carried.
	publisher     string
	requests      map[string]int
	unknownPoints []string
	endpoints     *cputimetruth.Endpoints
}

// measureCPUTime: the publisher's workers run threadpub.RouteMix (spans of
// known routes, each lasting a known CPU time) while the real profiler
// samples the busy host; the enriched profiles go through the cputime
// connector in the distribution (its defaults, 5 s flushes), and each
// route's share of the CPU time and each long span's CPU time are held
// against the truth (cputimetruth's rules, as the stand-in profiler's test).
func measureCPUTime(ctx context.Context, cfg *config, hz int, k kind, dir string) (_ *cpuResult, err error) {
	if k.node != "" {
		return measureCPUTimeNode(ctx, cfg, hz, k, dir)
	}
	if k.name != "threadpub" {
		return nil, fmt.Errorf("-mode cputime measures the threadpub publisher or a node kind (their routes and CPU times are the truth), not %s", k.name)
	}
	ps := &procs{}
	defer ps.stopAll()
	profPath := filepath.Join(dir, "profiles.jsonl")
	ct := &distrun.CPUTime{FlushInterval: 5 * time.Second, Metrics: filepath.Join(dir, "cputime-metrics.jsonl"), Logs: filepath.Join(dir, "cputime-logs.jsonl")}
	colCfg := distrun.Config{Profiles: &distrun.Profiles{GRPC: otlpEndpoint, Path: profPath, CPUTime: ct}}.YAML()
	h, err := startHost(ctx, ps, cfg, hz, k, dir, colCfg)
	if err != nil {
		return nil, err
	}
	pub := h.pub
	var times result
	prof, err := startProfiler(ctx, ps, cfg, hz, dir, &times, h.logf)
	if err != nil {
		return nil, err
	}
	out := &output{path: profPath, pid: int64(pub.pid)}
	if err := warmUp(ctx, cfg, h, prof, out, dir); err != nil {
		return nil, err
	}
	res := &cpuResult{hz: hz, hogs: cfg.hogsPerCore * runtime.NumCPU(), cpus: runtime.NumCPU(), workers: cfg.workers,
		spansPerWorker: mixRounds(cfg, hz, false) * len(threadpub.RouteMix), periodNs: float64(int64(time.Second) / int64(hz)),
		attach: times.profAttach.Sub(times.profStart), exemplars: map[string]int{}, badExemplars: map[string]int{}}
	truth, start, exitAt, err := runMix(ctx, cfg, h, res, dir)
	if err != nil {
		return nil, err
	}
	evs, err := collect(ctx, cfg, h, prof, out, ct, truth, start, exitAt)
	if err != nil {
		return nil, err
	}
	gotRoute, err := readRouteMetric(ct.Metrics, k.service, res)
	if err != nil {
		return nil, err
	}
	records, err := readSpanRecords(ct.Logs, k.service)
	if err != nil {
		return nil, err
	}
	res.score(truth, gotRoute, records, evs)
	return res, nil
}

// runMix runs the measured spans on every worker, reads their truth and
// makes the publisher exit.
func runMix(ctx context.Context, cfg *config, h *host, res *cpuResult, dir string) (truth []threadpub.Span, start, exitAt time.Time, err error) {
	pub := h.pub
	start = time.Now()
	paths := map[int64]string{}
	for w := 0; w < cfg.workers; w++ {
		path := filepath.Join(dir, fmt.Sprintf("truth-routes-%d", w))
		f, err := pub.do(ctx, 10*time.Second, "switch %d %d 1 %s %s", w, res.spansPerWorker, path, threadpub.RouteSpec(threadpub.RouteMix))
		if err != nil {
			return nil, start, exitAt, err
		}
		tid, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, start, exitAt, fmt.Errorf("switch reply %q", f)
		}
		paths[tid] = path
	}
	h.logf("run: %d workers x %d spans of %s", cfg.workers, res.spansPerWorker, threadpub.RouteSpec(threadpub.RouteMix))
	for w := 0; w < cfg.workers; w++ {
		if _, err := pub.do(ctx, 30*time.Minute, "wait %d", w); err != nil {
			return nil, start, exitAt, err
		}
	}
	res.wall = time.Since(start)
	for _, path := range paths {
		tr, err := threadpub.ReadSwitchTruth(path)
		if err != nil {
			return nil, start, exitAt, err
		}
		if len(tr.Spans) != res.spansPerWorker {
			return nil, start, exitAt, fmt.Errorf("%s: %d spans, want %d", path, len(tr.Spans), res.spansPerWorker)
		}
		truth = append(truth, tr.Spans...)
	}
	if exitAt, err = pub.exit(ctx); err != nil {
		return nil, start, exitAt, err
	}
	h.logf("run over in %.1f s; publisher exited", res.wall.Seconds())
	return truth, start, exitAt, nil
}

// collect waits for the reports that cover the run's end, then two more
// metric flushes (the metric is cumulative: its last point holds every
// sample), then stops the collector (its shutdown flushes the span
// records); it returns the measured run's samples of the publisher:
// linked to its spans, or unlinked after its start.
func collect(ctx context.Context, cfg *config, h *host, prof *proc, out *output, ct *distrun.CPUTime, truth []threadpub.Span, start, exitAt time.Time) ([]event, error) {
	want := exitAt.Add(cfg.reporterInterval + time.Second).UnixNano()
	if err := waitFor(ctx, "the profiles covering the publisher's exit", 4*cfg.reporterInterval+time.Minute, 200*time.Millisecond, func() (bool, error) {
		err := out.poll()
		_, _, _, maxEnd, _ := out.snapshot()
		return maxEnd >= want, err
	}, h.col, prof); err != nil {
		return nil, err
	}
	flushes, err := countLines(ct.Metrics)
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, "two more metric flushes", time.Minute, 200*time.Millisecond, func() (bool, error) {
		n, err := countLines(ct.Metrics)
		return n >= flushes+2, err
	}, h.col); err != nil {
		return nil, err
	}
	h.col.stop(30 * time.Second)
	if err := out.poll(); err != nil {
		return nil, err
	}
	all, _, _, _, _ := out.snapshot()
	measured := map[string]bool{}
	for _, sp := range truth {
		measured[sp.SpanID] = true
	}
	var evs []event
	for _, e := range all {
		if measured[e.link] || e.link == "" && e.ts >= start.UnixNano() {
			evs = append(evs, e)
		}
	}
	return evs, nil
}

// spanRecord: a span's CPU time and sample count, summed over its records
// (one per flush interval it was seen in).
type spanRecord struct {
	seconds float64
	samples int64
	trace   string
}

func (r *cpuResult) score(truth []threadpub.Span, gotRoute map[string]float64, records map[string]*spanRecord, evs []event) {
	trueRoute := map[string]float64{}
	routeOf := map[string]string{}
	for _, s := range truth {
		trueRoute[s.Route] += float64(s.CPUNs) / 1e9
		routeOf[s.SpanID] = s.Route
	}
	r.routes = cputimetruth.Routes(trueRoute, gotRoute)
	for _, rt := range r.routes {
		r.trueAll += rt.TrueS
		r.gotAll += rt.GotS
	}
	linkedTo := map[string]int64{}
	for _, e := range evs {
		if e.link == "" {
			r.unlinked++
			continue
		}
		r.linked++
		linkedTo[e.link]++
	}
	long := 0
	for _, s := range truth {
		if s.CPUNs >= cputimetruth.SpanMinNs {
			long++
		}
	}
	for _, s := range truth {
		rec, ok := records[s.TraceID+"/"+s.SpanID]
		if ok && rec.samples != linkedTo[s.SpanID] {
			r.recordMismatch++
		}
		if s.CPUNs < cputimetruth.SpanMinNs {
			continue
		}
		r.spans++
		if !ok {
			r.spansMissing++
			continue
		}
		got, want := rec.seconds*1e9, float64(s.CPUNs)
		bound := cputimetruth.SpanBound(want, r.periodNs)
		if math.Abs(got-want) <= bound {
			r.spansWithin++
		}
		family := cputimetruth.SpanFamilyBound(want, r.periodNs, long)
		if math.Abs(got-want) <= family {
			r.spansWithinFamily++
		}
		r.worstOfFamily = max(r.worstOfFamily, math.Abs(got-want)/family)
		r.spanRelErr = append(r.spanRelErr, got/want-1)
		if e := math.Abs(got-want) / r.periodNs; e > r.worstSamples {
			r.worstSamples, r.worstOfBound = e, math.Abs(got-want)/bound
		}
	}
	// Exemplars name spans of their point's route.
	for route, ids := range r.exemplarIDs {
		for _, id := range ids {
			if routeOf[id] == route {
				r.exemplars[route]++
			} else {
				r.badExemplars[route]++
			}
		}
	}
}

func (r *cpuResult) goalMet() bool {
	for _, rt := range r.routes {
		if ok, _ := r.withinGoal(rt); !ok {
			return false
		}
	}
	if r.endpoints != nil {
		// A service by endpoint: the shares, every sample under its own
		// endpoint, every span record exact and present. Spans against
		// SpanBound are reported: the profiler's timer over-counts a
		// preempted CPU-bound thread (+10 % on average, the same on every
		// route), which the share cancels and a span's count does not.
		return len(r.routes) > 0 && r.endpoints.Wrong == 0 && r.endpoints.Stray == 0 && len(r.unknownPoints) == 0 &&
			r.recordMismatch == 0 && r.spans > 0 && r.spansMissing == 0
	}
	return len(r.routes) > 0 && r.spans > 0 && r.spansWithinFamily == r.spans && r.spansMissing == 0 && r.metricExact()
}

func (r *cpuResult) print(label string) {
	if r.publisher == "" {
		r.publisher = "threadpub"
	}
	fmt.Printf("\n== cputime: %s, %d Hz (%s)\n", r.publisher, r.hz, label)
	fmt.Printf("%d CPU hogs on %d CPUs; %d workers x %d spans (threadpub.RouteMix x %d), %.1f s; the profiler attached %.1f s after its start\n",
		r.hogs, r.cpus, r.workers, r.spansPerWorker, r.spansPerWorker/len(threadpub.RouteMix), r.wall.Seconds(), r.attach.Seconds())
	fmt.Printf("the publisher's sample timestamps: %d linked, %d unlinked (between spans, the main thread)\n", r.linked, r.unlinked)
	for _, rt := range r.routes {
		ok, bound := r.withinGoal(rt)
		mark := fmt.Sprintf("within ±%.2f %%", 100*bound)
		if !ok {
			mark = fmt.Sprintf("BEYOND ±%.2f %%", 100*bound)
		}
		if r.requests != nil && !rt.Within() {
			mark += fmt.Sprintf("; beyond the C publisher's ±%.0f %%", 100*cputimetruth.RouteShareTolerance)
		}
		// σ: the share's sampling error alone (cputimetruth.ShareSigma).
		sigma := r.shareSigma(rt)
		fmt.Printf("  %s (σ %.2f %%: %+.1f σ; the bound is %.1f σ); exemplars %d (%d of another route's span) [%s]\n",
			rt, 100*sigma, rt.ShareDev()/sigma, bound/sigma, r.exemplars[rt.Name], r.badExemplars[rt.Name], mark)
	}
	if e := r.endpoints; e != nil {
		fmt.Printf("the event loop's sample timestamps: inside requests (1 ms from their edges) %d with their endpoint, %d with none, %d with another (wrong); outside requests %d with none, %d with the previous request's (its tail), %d with an earlier request's it is linked to (a continuation), %d with another (stray)\n",
			e.Inside, e.InsideNone, e.Wrong, e.Outside, e.Tail, e.Continued, e.Stray)
		fmt.Printf("points of endpoints the service did not serve: %d %v\n", len(r.unknownPoints), r.unknownPoints)
	}
	fmt.Printf("all routes: true %.3f s, measured %.3f s (%+.2f %%)\n", r.trueAll, r.gotAll, 100*(r.gotAll/r.trueAll-1))
	if r.requests == nil {
		fmt.Printf("the metric's routes count %.1f samples, the publisher's samples linked to its measured spans are %d (exact: %v)\n",
			r.gotAll*1e9/r.periodNs, r.linked, r.metricExact())
	}
	var mean, sd float64
	for _, e := range r.spanRelErr {
		mean += e
	}
	if n := float64(len(r.spanRelErr)); n > 0 {
		mean /= n
		for _, e := range r.spanRelErr {
			sd += (e - mean) * (e - mean)
		}
		sd = math.Sqrt(sd / n)
	}
	z := cputimetruth.SpanFamilyZ(r.spans)
	fmt.Printf("spans >= %d ms: %d, within ±(3·√(T/P)+1)·P each: %d, within ±(%.2f·√(T/P)+1)·P (%d held together): %d, without a record: %d; largest error %.1f samples (%.0f %% of its 3σ bound, %.0f %% of its %.2fσ bound); error mean %+.2f %%, sd %.2f %%\n",
		cputimetruth.SpanMinNs/1_000_000, r.spans, r.spansWithin, z, r.spans, r.spansWithinFamily, r.spansMissing, r.worstSamples, 100*r.worstOfBound, 100*r.worstOfFamily, z, 100*mean, 100*sd)
	fmt.Printf("span records whose sample count differs from the samples ctxenrich linked to the span: %d\n", r.recordMismatch)
	verdict := "met"
	if !r.goalMet() {
		verdict = "MISSED"
	}
	if r.requests != nil {
		fmt.Printf("goal (every route's share within cputimetruth.ShareBound of its true share, no sample under another endpoint, every span >= %d ms with a record, every record exact): %s\n",
			cputimetruth.SpanMinNs/1_000_000, verdict)
		return
	}
	fmt.Printf("goal (every route's share within %.0f %% of its true share, every span >= %d ms within ±(%.2f·√(T/P)+1)·P): %s\n",
		100*cputimetruth.RouteShareTolerance, cputimetruth.SpanMinNs/1_000_000, z, verdict)
}

// countLines counts the complete lines of a file (0 before it exists).
func countLines(path string) (int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	return strings.Count(string(b), "\n"), err
}

// eachLine calls fn with every non-empty line of an OTLP JSON file.
func eachLine(path string, fn func([]byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		if err := fn(sc.Bytes()); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return sc.Err()
}

// readRouteMetric: the cumulative CPU time metric's last value per series
// of the service, summed by route; the exemplars' span ids by route go to
// res.exemplarIDs.
func readRouteMetric(path, service string, res *cpuResult) (map[string]float64, error) {
	return readDimensionMetric(path, service, routeKey, func(v string) string { return v }, res)
}

// readDimensionMetric is readRouteMetric by another dimension, each value
// turned into a route by route.
func readDimensionMetric(path, service, key string, route func(string) string, res *cpuResult) (map[string]float64, error) {
	type point struct {
		ts    uint64
		value float64
		route string
	}
	last := map[string]point{}
	res.exemplarIDs = map[string][]string{}
	var um pmetric.JSONUnmarshaler
	err := eachLine(path, func(line []byte) error {
		md, err := um.UnmarshalMetrics(line)
		if err != nil {
			return err
		}
		for _, rm := range md.ResourceMetrics().All() {
			if v, ok := rm.Resource().Attributes().Get("service.name"); !ok || v.AsString() != service {
				continue
			}
			for _, sm := range rm.ScopeMetrics().All() {
				for _, m := range sm.Metrics().All() {
					if m.Name() != cputimeconnector.MetricName || m.Type() != pmetric.MetricTypeSum {
						continue
					}
					if m.Sum().AggregationTemporality() != pmetric.AggregationTemporalityCumulative {
						return errors.New("the CPU time metric is not cumulative (the connector's default)")
					}
					for _, dp := range m.Sum().DataPoints().All() {
						v, ok := dp.Attributes().Get(key)
						if !ok {
							continue
						}
						r := route(v.Str())
						series := fmt.Sprint(dp.Attributes().AsRaw())
						if p, seen := last[series]; !seen || uint64(dp.Timestamp()) >= p.ts {
							last[series] = point{ts: uint64(dp.Timestamp()), value: dp.DoubleValue(), route: r}
						}
						for _, ex := range dp.Exemplars().All() {
							sp := ex.SpanID()
							res.exemplarIDs[r] = append(res.exemplarIDs[r], hex.EncodeToString(sp[:]))
						}
					}
				}
			}
		}
		return nil
	})
	got := map[string]float64{}
	for _, p := range last {
		got[p.route] += p.value
	}
	return got, err
}

// readSpanRecords: the service's span records, summed by trace and span id
// ("TRACE/SPAN", hex): another publisher of the same service on the host
// may reuse a span id in another trace.
func readSpanRecords(path, service string) (map[string]*spanRecord, error) {
	out := map[string]*spanRecord{}
	var um plog.JSONUnmarshaler
	err := eachLine(path, func(line []byte) error {
		ld, err := um.UnmarshalLogs(line)
		if err != nil {
			return err
		}
		for _, rl := range ld.ResourceLogs().All() {
			if v, ok := rl.Resource().Attributes().Get("service.name"); !ok || v.AsString() != service {
				continue
			}
			for _, sl := range rl.ScopeLogs().All() {
				for _, lr := range sl.LogRecords().All() {
					sp, tr := lr.SpanID(), lr.TraceID()
					id := hex.EncodeToString(tr[:]) + "/" + hex.EncodeToString(sp[:])
					rec := out[id]
					if rec == nil {
						rec = &spanRecord{trace: hex.EncodeToString(tr[:])}
						out[id] = rec
					}
					if v, ok := lr.Attributes().Get(cputimeconnector.AttrCPUTime); ok {
						rec.seconds += v.Double()
					}
					if v, ok := lr.Attributes().Get(cputimeconnector.AttrSampleCount); ok {
						rec.samples += v.Int()
					}
				}
			}
		}
		return nil
	})
	return out, err
}

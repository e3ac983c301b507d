// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// run is one measured switch run: every worker ran spans of ms ms.
type run struct {
	ms    int
	truth map[int64]threadpub.SwitchTruth // by TID
}

// counts is right / wrong / unlinked.
type counts struct{ right, wrong, unlinked int }

func (c counts) total() int { return c.right + c.wrong + c.unlinked }

func (c *counts) add(o counts) { c.right += o.right; c.wrong += o.wrong; c.unlinked += o.unlinked }

func pct(n, d int) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(d))
}

func (c counts) String() string {
	t := c.total()
	return fmt.Sprintf("%5d %7s %5d %7s %5d %7s", c.right, pct(c.right, t), c.wrong, pct(c.wrong, t), c.unlinked, pct(c.unlinked, t))
}

// verdict is where a sample's time falls in the ground truth.
type verdict struct {
	run      int // index into runs, -1 outside every run of its thread
	span     *threadpub.Span
	boundary bool  // within boundaryNs of a span boundary (or the run's end)
	outside  int64 // for run == -1: distance to the nearest run window of that thread (ns)
}

const boundaryNs = int64(time.Millisecond)

// locate finds the span of thread tid at time ts (CLOCK_REALTIME ns)
// shifted by shift ns.
func locate(runs []run, tid, ts int64) verdict {
	best := int64(math.MaxInt64)
	for ri, r := range runs {
		tr, ok := r.truth[tid]
		if !ok || len(tr.Spans) == 0 {
			continue
		}
		lo, hi := tr.Spans[0].RealStart, tr.DoneReal
		if ts < lo-boundaryNs || ts > hi+boundaryNs {
			d := lo - ts
			if ts > hi {
				d = ts - hi
			}
			best = min(best, d)
			continue
		}
		v := verdict{run: ri}
		// The last span that started at or before ts.
		i := sort.Search(len(tr.Spans), func(i int) bool { return tr.Spans[i].RealStart > ts }) - 1
		if i >= 0 && ts <= tr.Spans[i].RealEnd {
			v.span = &tr.Spans[i]
		} else if i >= 0 {
			// Between span i's end and span i+1's start the worker is
			// replacing its record (preempted there on a busy host, for
			// milliseconds): it still publishes span i until just before
			// i+1 starts. Either link is defensible: a boundary sample.
			v.span, v.boundary = &tr.Spans[i], true
		}
		near := func(b int64) bool { return ts >= b-boundaryNs && ts <= b+boundaryNs }
		for j := max(0, i-1); j <= min(len(tr.Spans)-1, i+1); j++ {
			if near(tr.Spans[j].RealStart) || near(tr.Spans[j].RealEnd) {
				v.boundary = true
			}
		}
		if near(tr.DoneReal) {
			v.boundary = true
		}
		return v
	}
	return verdict{run: -1, outside: best}
}

// judge compares a sample's link with the span it was taken in.
func judge(v verdict, link string) counts {
	switch {
	case link == "":
		return counts{unlinked: 1}
	case v.span != nil && link == v.span.SpanID:
		return counts{right: 1}
	default:
		return counts{wrong: 1}
	}
}

// result is the score of one profiler frequency.
type result struct {
	hz          int
	pid         int
	service     string
	runs        []run
	byRun       []counts // non-boundary samples, per run
	boundary    []counts // boundary samples, per run
	outside     int      // samples of the publisher outside every run (between runs, other threads)
	outsideNear []int64  // of those, distances (ns) to the nearest run of their thread when < 100 ms
	svcAll      [2]int   // samples with the service.name, of all the publisher's samples
	svcAfter    [2]int   // the same, for samples written after the publisher exited
	linkAfter   counts   // link score of the scored samples written after the exit
	wrongDelta  []int64  // for wrong links: sample time minus the linked span's interval (ns; >0: stale link)
	bestShift   int64    // the shift (ns) of sample times that maximises right links
	bestRight   [2]int   // right links at bestShift / at 0, out of the scored linked samples
	edges       []string // per run: first sample - first span start, done - last sample
	exitAt      time.Time
	// The start: when the profiler was started and logged its attach, its
	// first sample of the publisher; byPhase scores the non-boundary
	// samples of the first firstPhase from that sample, and the rest.
	profStart, profAttach time.Time
	firstSample           int64 // Unix ns, 0: none
	firstPhase            time.Duration
	byPhase               [2]counts
	followLog             []string // the collector's "thread contexts:" log lines
}

func (r *result) goalMet() bool {
	if len(r.byRun) == 0 {
		return false
	}
	for _, c := range r.byRun {
		if c.total() == 0 || c.wrong > 0 || float64(c.right) < 0.99*float64(c.total()) {
			return false
		}
	}
	return true
}

// score scores every sample of the publisher. exitOff is the output file's
// size when the publisher had exited: lines from there on arrived after.
func score(res *result, events []event, exitOff int64, csv io.Writer) {
	fmt.Fprintln(csv, "tid,ts_unix_ns,link,run_ms,truth_span,since_span_start_ns,until_span_end_ns,boundary,after_exit,service,verdict")
	runs := res.runs
	res.byRun = make([]counts, len(runs))
	res.boundary = make([]counts, len(runs))
	type scored struct {
		ev event
		v  verdict
	}
	var all []scored
	first := make([]map[int64]int64, len(runs))
	last := make([]map[int64]int64, len(runs))
	for i := range runs {
		first[i], last[i] = map[int64]int64{}, map[int64]int64{}
	}
	for _, ev := range events {
		if v := locate(runs, ev.tid, ev.ts); v.run >= 0 && (res.firstSample == 0 || ev.ts < res.firstSample) {
			res.firstSample = ev.ts
		}
	}
	for _, ev := range events {
		after := ev.off >= exitOff
		hasSvc := ev.service == res.service
		res.svcAll[1]++
		if hasSvc {
			res.svcAll[0]++
		}
		if after {
			res.svcAfter[1]++
			if hasSvc {
				res.svcAfter[0]++
			}
		}
		v := locate(runs, ev.tid, ev.ts)
		{
			runMS, truth, since, until := 0, "", int64(0), int64(0)
			if v.run >= 0 {
				runMS = runs[v.run].ms
			}
			if v.span != nil {
				truth, since, until = v.span.SpanID, ev.ts-v.span.RealStart, v.span.RealEnd-ev.ts
			}
			verdict := "outside"
			if v.run >= 0 {
				c := judge(v, ev.link)
				verdict = map[bool]string{true: "right", false: map[bool]string{true: "wrong", false: "unlinked"}[c.wrong > 0]}[c.right > 0]
			}
			fmt.Fprintf(csv, "%d,%d,%s,%d,%s,%d,%d,%t,%t,%s,%s\n", ev.tid, ev.ts, ev.link, runMS, truth, since, until, v.boundary, after, ev.service, verdict)
		}
		if v.run < 0 {
			res.outside++
			if v.outside < int64(100*time.Millisecond) {
				res.outsideNear = append(res.outsideNear, v.outside)
			}
			continue
		}
		if f, ok := first[v.run][ev.tid]; !ok || ev.ts < f {
			first[v.run][ev.tid] = ev.ts
		}
		if l, ok := last[v.run][ev.tid]; !ok || ev.ts > l {
			last[v.run][ev.tid] = ev.ts
		}
		c := judge(v, ev.link)
		if v.boundary {
			res.boundary[v.run].add(c)
			continue
		}
		res.byRun[v.run].add(c)
		phase := 0
		if ev.ts >= res.firstSample+int64(res.firstPhase) {
			phase = 1
		}
		res.byPhase[phase].add(c)
		if after {
			res.linkAfter.add(c)
		}
		all = append(all, scored{ev, v})
		if c.wrong > 0 {
			// Where is the linked span relative to the sample?
			tr := runs[v.run].truth[ev.tid]
			for _, s := range tr.Spans {
				if s.SpanID == ev.link {
					switch {
					case ev.ts > s.RealEnd:
						res.wrongDelta = append(res.wrongDelta, ev.ts-s.RealEnd)
					case ev.ts < s.RealStart:
						res.wrongDelta = append(res.wrongDelta, ev.ts-s.RealStart)
					default:
						res.wrongDelta = append(res.wrongDelta, 0)
					}
					break
				}
			}
		}
	}
	// The shift of sample times that best explains the links.
	bestN := -1
	for shift := int64(-50 * time.Millisecond); shift <= int64(50*time.Millisecond); shift += int64(250 * time.Microsecond) {
		n := 0
		for _, s := range all {
			if s.ev.link == "" {
				continue
			}
			v := locate(runs, s.ev.tid, s.ev.ts+shift)
			if v.span != nil && v.span.SpanID == s.ev.link {
				n++
			}
		}
		if shift == 0 {
			res.bestRight[1] = n
		}
		if n > bestN || (n == bestN && abs(shift) < abs(res.bestShift)) {
			bestN, res.bestShift = n, shift
		}
	}
	res.bestRight[0] = bestN
	for i, r := range runs {
		var parts []string
		for tid, tr := range r.truth {
			f, ok := first[i][tid]
			if !ok {
				parts = append(parts, fmt.Sprintf("tid %d: no samples", tid))
				continue
			}
			parts = append(parts, fmt.Sprintf("tid %d: first sample %+.1f ms after the first span's start, last %+.1f ms before done",
				tid, ms(f-tr.Spans[0].RealStart), ms(tr.DoneReal-last[i][tid])))
		}
		sort.Strings(parts)
		res.edges = append(res.edges, fmt.Sprintf("%d ms run: %s", r.ms, strings.Join(parts, "; ")))
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

func quantiles(xs []int64) string {
	if len(xs) == 0 {
		return "-"
	}
	s := append([]int64(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) float64 { return ms(s[int(p*float64(len(s)-1))]) }
	return fmt.Sprintf("min %.1f, p10 %.1f, median %.1f, p90 %.1f, max %.1f ms (n=%d)", q(0), q(0.1), q(0.5), q(0.9), q(1), len(s))
}

func (r *result) print(w io.Writer, hogs, cpus int, label string) {
	fmt.Fprintf(w, "\n== profiler at %d Hz, %d CPU hogs on %d CPUs, publisher pid %d (service.name %s), %s\n", r.hz, hogs, cpus, r.pid, r.service, label)
	fmt.Fprintf(w, "%-6s %7s | %-13s %-13s %-13s | %s\n", "spans", "samples", "right", "wrong", "unlinked", "boundary (+-1 ms): right/wrong/unlinked")
	for i, run := range r.runs {
		c, b := r.byRun[i], r.boundary[i]
		fmt.Fprintf(w, "%3d ms %7d | %s | %d/%d/%d\n", run.ms, c.total(), c, b.right, b.wrong, b.unlinked)
	}
	for _, run := range r.runs {
		var n, sum, first, done int64
		for _, tr := range run.truth {
			for _, s := range tr.Spans {
				n++
				sum += s.RealEnd - s.RealStart
			}
			if len(tr.Spans) > 0 && (first == 0 || tr.Spans[0].RealStart < first) {
				first = tr.Spans[0].RealStart
			}
			done = max(done, tr.DoneReal)
		}
		if n > 0 {
			fmt.Fprintf(w, "%d ms run: %d spans over %.1f s, a span lasted %.1f ms on average (a busy-looping span ends when its thread runs again after its end)\n",
				run.ms, n, float64(done-first)/1e9, ms(sum/n))
		}
	}
	r.printStart(w)
	fmt.Fprintf(w, "service.name=%s: %d of %d samples of the publisher (%s); written after it exited: %d of %d (%s)\n",
		r.service, r.svcAll[0], r.svcAll[1], pct(r.svcAll[0], r.svcAll[1]), r.svcAfter[0], r.svcAfter[1], pct(r.svcAfter[0], r.svcAfter[1]))
	la := r.linkAfter
	fmt.Fprintf(w, "links of the scored samples written after the exit: right %d, wrong %d, unlinked %d (of %d)\n", la.right, la.wrong, la.unlinked, la.total())
	fmt.Fprintf(w, "samples outside the measured runs (between them, before the exit): %d; of them within 100 ms of a run: %d (%s)\n", r.outside, len(r.outsideNear), quantiles(r.outsideNear))
	fmt.Fprintf(w, "wrong links, sample time minus the linked span (>0: the link is an earlier span): %s\n", quantiles(r.wrongDelta))
	fmt.Fprintf(w, "timestamps: shifting sample times by %+.2f ms gives the most right links (%d vs %d at 0)\n", ms(r.bestShift), r.bestRight[0], r.bestRight[1])
	for _, e := range r.edges {
		fmt.Fprintf(w, "edges: %s\n", e)
	}
	goal := "MET"
	if !r.goalMet() {
		goal = "MISSED"
	}
	fmt.Fprintf(w, "goal (>= 99%% right and 0 wrong for every span length): %s\n", goal)
}

// printStart says when the profiler started, attached and first sampled the
// publisher, and how its first samples scored against the rest.
func (r *result) printStart(w io.Writer) {
	if r.profStart.IsZero() {
		return
	}
	first := "no sample of the publisher"
	if r.firstSample != 0 {
		first = fmt.Sprintf("its first sample of the publisher %.1f s after its start", float64(r.firstSample-r.profStart.UnixNano())/1e9)
	}
	fmt.Fprintf(w, "start: the profiler started during the first run, attached %.1f s after its start, %s\n",
		r.profAttach.Sub(r.profStart).Seconds(), first)
	fmt.Fprintf(w, "%-18s %7s | %-13s %-13s %-13s\n", "samples", "", "right", "wrong", "unlinked")
	fmt.Fprintf(w, "%-18s %7d | %s\n", fmt.Sprintf("first %s", r.firstPhase), r.byPhase[0].total(), r.byPhase[0])
	fmt.Fprintf(w, "%-18s %7d | %s\n", "the rest", r.byPhase[1].total(), r.byPhase[1])
	fmt.Fprintf(w, "profiler started %s, attached %s; the collector said:\n", r.profStart.UTC().Format("15:04:05.000"), r.profAttach.UTC().Format("15:04:05.000"))
	for _, l := range r.followLog {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

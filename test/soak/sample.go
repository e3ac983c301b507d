// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// row is one sample of the agent.
type row struct {
	minute                  float64
	rss, hwm, heap          float64 // MiB
	cpu                     float64 // % of one core over the interval
	fds                     int
	processes, retained     float64 // the catalog, by kind
	threads, runs           float64
	contexts                float64
	followed, enriched      float64 // counters
	unmatched, entityEvents float64
	sent, sendErrors        int64
}

var columns = []string{"minute", "rss_mib", "hwm_mib", "heap_mib", "cpu_pct", "fds",
	"catalog_processes", "catalog_retained", "catalog_threads", "catalog_runs", "contexts",
	"samples_followed", "samples_enriched", "samples_unmatched", "entity_events", "samples_sent", "send_errors"}

func (r row) tsv() string {
	return fmt.Sprintf("%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t%d",
		r.minute, r.rss, r.hwm, r.heap, r.cpu, r.fds, r.processes, r.retained, r.threads, r.runs, r.contexts,
		r.followed, r.enriched, r.unmatched, r.entityEvents, r.sent, r.sendErrors)
}

func (s *soak) sample(pid int, metricsURL string, t0 *time.Time, c0 *uint64) (row, error) {
	var r row
	t1, c1, err := cpuTicks(pid)
	if err != nil {
		return r, err
	}
	r.cpu = 100 * float64(c1-*c0) / 100 / t1.Sub(*t0).Seconds() // USER_HZ is 100
	*t0, *c0 = t1, c1
	if r.rss, err = statusMiB(pid, "VmRSS"); err != nil {
		return r, err
	}
	if r.hwm, err = statusMiB(pid, "VmHWM"); err != nil {
		return r, err
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return r, err
	}
	r.fds = len(ents)
	m, err := scrape(metricsURL)
	if err != nil {
		// A busy host can hold a scrape past its timeout: the row keeps its
		// /proc figures and says -1 for the collector's own.
		fmt.Fprintf(os.Stderr, "soak: scraping %s: %v (row without the collector's metrics)\n", metricsURL, err)
		r.heap, r.processes, r.retained, r.threads, r.runs, r.contexts = -1, -1, -1, -1, -1, -1
		r.followed, r.enriched, r.unmatched, r.entityEvents = -1, -1, -1, -1
		r.sent, r.sendErrors = s.sent.Load(), s.sendErrors.Load()
		return r, nil
	}
	r.heap = m.sum("otelcol_process_runtime_heap_alloc_bytes", "") / (1 << 20)
	r.processes = m.sum("otelcol_processctx_catalog_used", `kind="processes"`)
	r.retained = m.sum("otelcol_processctx_catalog_used", `kind="retained_processes"`)
	r.threads = m.sum("otelcol_processctx_catalog_used", `kind="threads"`)
	r.runs = m.sum("otelcol_processctx_catalog_used", `kind="runs"`)
	r.contexts = m.sum("otelcol_processctx_contexts", "")
	r.followed = m.sum("otelcol_processctx_thread_samples_followed", "")
	r.enriched = m.sum("otelcol_ctxenrich_samples_enriched", "")
	r.unmatched = m.sum("otelcol_ctxenrich_samples_unmatched", "")
	r.entityEvents = m.sum("otelcol_processctx_entity_events", "")
	r.sent, r.sendErrors = s.sent.Load(), s.sendErrors.Load()
	return r, nil
}

// metrics is the collector's Prometheus text: series (name{labels}) to value.
type metrics map[string]float64

func scrape(url string) (metrics, error) {
	cl := http.Client{Timeout: 20 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New(resp.Status)
	}
	m := metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}

// sum adds the series of a metric (with or without the _total suffix of
// a counter) whose labels contain label.
func (m metrics) sum(name, label string) float64 {
	var v float64
	for series, x := range m {
		n, labels, _ := strings.Cut(series, "{")
		if (n == name || n == name+"_total") && strings.Contains(labels, label) {
			v += x
		}
	}
	return v
}

// bound compares the rows after the warm-up with the RSS at its end.
func bound(rows []row, warmup, maxGrowth float64) (string, bool) {
	var base *row
	var after []row
	for i := range rows {
		if rows[i].minute <= warmup {
			base = &rows[i]
		} else {
			after = append(after, rows[i])
		}
	}
	if base == nil || len(after) < 2 {
		return fmt.Sprintf("soak: %d rows, too few after a %.0f-minute warm-up for a bound", len(rows), warmup), true
	}
	var maxRSS, maxHeap, sumCPU float64
	for _, r := range after {
		maxRSS, maxHeap = max(maxRSS, r.rss), max(maxHeap, r.heap)
		sumCPU += r.cpu
	}
	// Growth is the last quarter's mean against the warm-up's end: a
	// transient (a slow gateway's backlog, returned) is reported by the
	// maximum, not counted as growth.
	tail := after[len(after)-max(len(after)/4, 1):]
	var tailRSS float64
	for _, r := range tail {
		tailRSS += r.rss
	}
	tailRSS /= float64(len(tail))
	growth := (tailRSS - base.rss) / base.rss
	ok := growth <= maxGrowth
	return fmt.Sprintf("soak: after the %.0f-minute warm-up (%d rows): RSS %.1f MiB at its end, %.1f MiB over the last quarter (%+.1f %%, bound %+.0f %%), at most %.1f MiB, slope %+.2f MiB/h; heap at most %.1f MiB, slope %+.2f MiB/h; CPU mean %.2f %% of a core; peak RSS %.1f MiB; %s",
		warmup, len(after), base.rss, tailRSS, 100*growth, 100*maxGrowth, maxRSS, slope(after, func(r row) float64 { return r.rss }),
		maxHeap, slope(after, func(r row) float64 { return r.heap }), sumCPU/float64(len(after)), rows[len(rows)-1].hwm,
		map[bool]string{true: "within the bound", false: "OVER THE BOUND"}[ok]), ok
}

// slope is the least-squares slope of f over the rows, per hour.
func slope(rows []row, f func(row) float64) float64 {
	var n, sx, sy, sxx, sxy float64
	for _, r := range rows {
		x, y := r.minute/60, f(r)
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

func cpuTicks(pid int) (time.Time, uint64, error) {
	now := time.Now()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return now, 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return now, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64) // field 14
	st, err2 := strconv.ParseUint(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return now, 0, fmt.Errorf("/proc/%d/stat: utime/stime", pid)
	}
	return now, ut + st, nil
}

func statusMiB(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

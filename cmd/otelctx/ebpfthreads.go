// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/attribution"
	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// sampleRun is a run of identical samples of one thread (--mode ebpf).
type sampleRun struct {
	threadread.Thread
	first, last time.Time
	samples     int
	rec         *catalog.ThreadRecord // what the run shows (nil: Reason)
}

// sampleThreads runs the eBPF sampler on pid alone for d, reading its OTEP
// 4947 records and its DD_OTEL_CTX slots (either or both, whichever the
// process has), and returns, per thread in time order, the runs of
// identical samples.
func (e *env) sampleThreads(pid, readCap, freq int, d time.Duration) ([]sampleRun, error) {
	// The identity first: a process that takes the PID over after this
	// read has another start time, and the kernel reads nothing of it.
	ticks, err := procstat.StartTicks(e.proc, pid)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("pid %d: no such process", pid)
		}
		return nil, e.pidError(pid, err)
	}
	km, v, otepErr := e.locateThreadContext(pid)
	dd, ddErr := e.findBuffer(pid)
	if err := e.sourcesRead(pid, otepErr, dd, ddErr); err != nil {
		return nil, err
	}
	s, err := sampler.New(sampler.Options{FrequencyHz: freq, ReadCap: readCap})
	if err != nil {
		return nil, err
	}
	// The judge lists the threads of a process with a DD_OTEL_CTX buffer
	// a first time: before the kernel reads anything.
	b, p, err := newRunBuilder(attribution.Config{ID: publisher.ProcessID{PID: pid, StartTicks: ticks}, Variable: v.Schema, Buffer: dd,
		KeyMap: km.keys, RefreshKeyMap: km.refresh, ProcRoot: e.proc})
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	if err := s.TrackTarget(sampler.Target{PID: pid, StartTicks: ticks, Thread: v.Ptr(), Buffer: dd}); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	var wg sync.WaitGroup
	var runErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		runErr = s.Run(p.Add, nil)
	}()
	// The window starts now (loading the programs can take seconds on a
	// busy host): -v says so.
	e.log.Debug("sampling", zap.Int("pid", pid), zap.Duration("for", d))
	timer := time.NewTimer(d)
	<-timer.C
	st, statsErr := s.Stats()
	closeErr := s.Close() // makes Run return
	wg.Wait()
	if runErr != nil {
		return nil, runErr
	}
	if closeErr != nil {
		e.log.Debug("closing the sampler", zap.Error(closeErr))
	}
	if statsErr == nil {
		fields := []zap.Field{zap.Int("pid", pid), zap.Uint64("samples", st.Samples), zap.Uint64("emitted", st.Emitted),
			zap.Uint64("dropped", st.Dropped), zap.Uint64("failures", st.Failures), zap.Uint64("stale", st.Stale)}
		refused := slices.SortedFunc(maps.Keys(st.Refused), func(a, b sampler.Refusal) int { return strings.Compare(a.Reason, b.Reason) })
		for _, r := range refused {
			if n := st.Refused[r]; n > 0 {
				fields = append(fields, zap.Uint64("refused "+r.Reason, n))
			}
		}
		e.log.Debug("sampler counters", fields...)
	}
	p.Finish()
	// Per thread, in time order (runs of one thread are appended in order).
	sort.SliceStable(b.runs, func(i, j int) bool { return b.runs[i].TID < b.runs[j].TID })
	return b.runs, nil
}

// runBuilder turns the observations of one process (internal/attribution
// judges the samples) into runs of identical observations, for display.
type runBuilder struct {
	runs []sampleRun
	last map[int]int // tid → index of its latest run
}

// newRunBuilder returns a builder and the judge that feeds it (cfg.Observe
// is set): samples go to the judge's Add, and its Finish ends the runs.
func newRunBuilder(cfg attribution.Config) (*runBuilder, *attribution.Process, error) {
	b := &runBuilder{last: map[int]int{}}
	cfg.Observe = b.observe
	p, err := attribution.NewProcess(cfg)
	if err != nil {
		return nil, nil, err
	}
	return b, p, nil
}

// observe extends the thread's latest run if it showed the same, or starts
// one.
func (b *runBuilder) observe(_ publisher.ProcessID, o attribution.Observation) {
	if i, ok := b.last[o.TID]; ok && b.runs[i].shows(o) {
		b.runs[i].last = o.Time
		b.runs[i].samples++
		return
	}
	th := threadread.Thread{TID: o.TID, Source: o.Source, Reason: o.Reason, Err: o.Err}
	if o.Record != nil {
		th.Record, th.Attributes = &o.Record.Record, o.Record.Attributes
	}
	b.last[o.TID] = len(b.runs)
	b.runs = append(b.runs, sampleRun{Thread: th, first: o.Time, last: o.Time, samples: 1, rec: o.Record})
}

// shows reports whether o shows what the run does: the same record, or the
// same reason from the same source.
func (r *sampleRun) shows(o attribution.Observation) bool {
	if r.rec != nil || o.Record != nil {
		return catalog.SameContent(r.rec, o.Record)
	}
	return r.Source == o.Source && r.Reason == o.Reason
}

func newRunsJSON(runs []sampleRun) []any {
	out := make([]any, 0, len(runs))
	ths := make([]threadread.Thread, len(runs))
	for i := range runs {
		ths[i] = runs[i].Thread
	}
	for i, j := range newThreadsJSON(ths) {
		b, _ := json.Marshal(j)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		m["time_unix_nano"] = runs[i].first.UnixNano()
		m["last_unix_nano"] = runs[i].last.UnixNano()
		m["samples"] = runs[i].samples
		out = append(out, m)
	}
	return out
}

// writeRunsText prints a table, a run per row.
func writeRunsText(w io.Writer, runs []sampleRun) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TID\tSOURCE\tFIRST\tLAST\tSAMPLES\tTRACE ID\tSPAN ID\tFLAGS\tATTRIBUTES")
	const layout = "15:04:05.000000"
	for _, r := range runs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t", r.TID, orDash(r.Source), r.first.Format(layout), r.last.Format(layout), r.samples)
		if r.Record == nil {
			fmt.Fprintf(tw, "-\t-\t-\t(no record: %s)\n", r.Reason)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%02x\t%s\n", r.Record.TraceID, r.Record.SpanID, r.Record.TraceFlags, orDash(attributesText(r.Attributes)))
	}
	return tw.Flush()
}

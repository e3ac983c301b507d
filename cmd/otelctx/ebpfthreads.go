package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/scan/procstat"
	"github.com/otelctx/otelctx/internal/scan/sampler"
	"github.com/otelctx/otelctx/internal/scan/threadctx"
	"github.com/otelctx/otelctx/internal/scan/threadread"
)

// sampleRun is a run of identical samples of one thread (--mode ebpf).
type sampleRun struct {
	threadread.Thread
	first, last time.Time
	samples     int
	key         string // what the thread showed (view.key), to tell runs apart
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
	tl, loc, otepErr := e.locateThreadContext(pid)
	dd, ddErr := e.findDD(pid)
	if err := e.sourcesRead(pid, otepErr, ddErr); err != nil {
		return nil, err
	}
	s, err := sampler.New(sampler.Options{FrequencyHz: freq, ReadCap: readCap})
	if err != nil {
		return nil, err
	}
	b := newRunBuilder(pid, loc != nil && dd != nil, tl.AttributeKeyMap, func() ([]string, error) { return e.readKeyMap(pid) })
	if dd != nil {
		if b.dd, err = newDDJudge(e.proc, pid, *dd); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("pid %d: %w", pid, err)
		}
	}
	if err := s.TrackTarget(sampler.Target{PID: pid, StartTicks: ticks, TLS: loc, DD: dd}); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	var wg sync.WaitGroup
	var runErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		runErr = s.Run(b.add, nil)
	}()
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
		e.log.Debug("sampler counters", zap.Int("pid", pid), zap.Uint64("samples", st.Samples), zap.Uint64("emitted", st.Emitted),
			zap.Uint64("dropped", st.Dropped), zap.Uint64("failures", st.Failures), zap.Uint64("stale", st.Stale),
			zap.Uint64("dd_busy", st.DDBusy), zap.Uint64("dd_torn", st.DDTorn))
	}
	b.finish()
	// Per thread, in time order (runs of one thread are appended in order).
	sort.SliceStable(b.runs, func(i, j int) bool { return b.runs[i].TID < b.runs[j].TID })
	return b.runs, nil
}

// view is what one source last showed for a thread.
type view struct {
	th  threadread.Thread
	key string // equal keys: the same record, or the same reason without one
}

// runBuilder turns the sampler's samples into runs. It runs on the
// sampler's Run goroutine, then (finish) on the caller's once Run returned.
type runBuilder struct {
	pid int
	// both: the kernel reads the two sources, so each capture of a thread
	// gives an OTEP 4947 sample, then a DD one (each may be missing: a
	// fault, a slot being written).
	both    bool
	keyMap  []string
	refresh func() ([]string, error) // re-reads the key map; nil once used
	// dd judges the DD samples (nil: no DD_OTEL_CTX buffer). With it, every
	// sample waits in held for the next thread listing, so that both
	// sources stay in the order they came.
	dd   *ddJudge
	held []sampler.Sample
	// pending is, per thread, the OTEP 4947 sample of a capture waiting
	// for the DD sample of the same capture (both).
	pending map[int]sampler.Sample
	// latest is, per thread, the last view of each source (0: OTEP 4947,
	// 1: DD): a capture missing one source keeps what it showed last.
	latest map[int]*[2]*view
	runs   []sampleRun
	last   map[int]int // tid → index of its latest run
}

// newRunBuilder returns a builder for pid's samples; the caller sets dd
// when the kernel reads a DD_OTEL_CTX buffer.
func newRunBuilder(pid int, both bool, keyMap []string, refresh func() ([]string, error)) *runBuilder {
	return &runBuilder{pid: pid, both: both, keyMap: keyMap, refresh: refresh,
		pending: map[int]sampler.Sample{}, latest: map[int]*[2]*view{}, last: map[int]int{}}
}

// add takes one sample.
func (b *runBuilder) add(smp sampler.Sample) {
	if smp.PID != b.pid {
		return
	}
	if b.dd == nil {
		b.take(smp)
		return
	}
	b.held = append(b.held, smp)
	if time.Since(b.dd.listedAt) >= ddListEvery {
		b.flush()
	}
}

// flush lists the threads again and takes every held sample: all were
// received, so taken, before that listing started.
func (b *runBuilder) flush() {
	if len(b.held) == 0 {
		return
	}
	b.dd.relist()
	for _, smp := range b.held {
		b.take(smp)
	}
	b.held = b.held[:0]
	b.dd.judged()
}

// finish takes what is still waiting once sampling ended.
func (b *runBuilder) finish() {
	if b.dd != nil {
		b.flush()
	}
	tids := make([]int, 0, len(b.pending))
	for tid := range b.pending {
		tids = append(tids, tid)
	}
	sort.Ints(tids)
	for _, tid := range tids {
		p := b.pending[tid]
		b.capture(&p, nil)
	}
	clear(b.pending)
}

// take pairs the two samples of a capture when the kernel reads both
// sources (the OTEP 4947 one comes first), and records the capture.
func (b *runBuilder) take(smp sampler.Sample) {
	dd := smp.Source == sampler.SourceDD
	switch {
	case !b.both && dd:
		b.capture(nil, &smp)
	case !b.both:
		b.capture(&smp, nil)
	case !dd:
		if p, ok := b.pending[smp.TID]; ok {
			b.capture(&p, nil) // its DD sample was not emitted
		}
		b.pending[smp.TID] = smp
	default:
		p, ok := b.pending[smp.TID]
		if !ok {
			b.capture(nil, &smp) // the OTEP 4947 read failed
			return
		}
		delete(b.pending, smp.TID)
		b.capture(&p, &smp)
	}
}

// capture records one capture of a thread (o, d: its OTEP 4947 and DD
// samples, either nil): what the thread shows is its sources' latest views
// merged as in the snapshot (threadread.Merge: an OTEP 4947 record wins);
// the same as its latest run extends that run.
func (b *runBuilder) capture(o, d *sampler.Sample) {
	smp := o
	if smp == nil {
		smp = d
	}
	v := b.latest[smp.TID]
	if v == nil {
		v = &[2]*view{}
		b.latest[smp.TID] = v
	}
	if o != nil {
		v[0] = b.otepView(*o)
	}
	if d != nil {
		th := b.dd.judge(*d)
		key := "dd " + th.Reason
		if th.Record != nil {
			key = fmt.Sprintf("dd %x %x %x", d.DD.TraceIDHigh, d.DD.TraceIDLow, d.DD.SpanID)
		}
		v[1] = &view{th: th, key: key}
	}
	cur := v[0]
	switch {
	case cur == nil:
		cur = v[1]
	case v[1] != nil:
		if m := threadread.Merge([]threadread.Thread{v[0].th}, []threadread.Thread{v[1].th}); m[0].Source == catalog.SourceDD {
			cur = v[1]
		}
	}
	if i, ok := b.last[smp.TID]; ok && b.runs[i].key == cur.key {
		b.runs[i].last = smp.Time
		b.runs[i].samples++
		return
	}
	b.last[smp.TID] = len(b.runs)
	b.runs = append(b.runs, sampleRun{Thread: cur.th, first: smp.Time, last: smp.Time, samples: 1, key: cur.key})
}

// otepView parses an OTEP 4947 sample and names its attributes.
func (b *runBuilder) otepView(smp sampler.Sample) *view {
	th := threadread.Thread{TID: smp.TID, Source: catalog.SourceOTEP4947}
	switch {
	case smp.NotAllocated:
		th.Reason = threadread.ReasonNotAllocated
	case smp.Record == nil:
		th.Reason = threadread.ReasonNullPointer
	default:
		r, err := threadctx.Parse(smp.Record)
		if err != nil {
			th.Reason, th.Err = threadread.ReasonNotValid, err
			break
		}
		var unknown []uint8
		th.Record = &r
		th.Attributes, unknown = r.Named(b.keyMap)
		if len(unknown) > 0 && b.refresh != nil {
			// The key map is append-only: a newer context may name
			// the index. Once per run of the command.
			refresh := b.refresh
			b.refresh = nil
			if km, err := refresh(); err == nil && len(km) > len(b.keyMap) {
				b.keyMap = km
				th.Attributes, _ = r.Named(b.keyMap)
			}
		}
		return &view{th: th, key: "otep " + string(smp.Record)}
	}
	return &view{th: th, key: "otep " + th.Reason}
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

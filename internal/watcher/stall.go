// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/proc/lockread"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/processctxtel"
	"github.com/otelctx/otelctx/internal/threadsource"
)

// Stage is a part of the watcher that can be stuck: it is busy from its
// begin to its end, and stuck when busy for too long.
type Stage int

// The stages (the otelcol_processctx_stalled gauge's stage attribute).
const (
	StagePollRound    Stage = iota // discovery, a poll, a rescan
	StageThreadReader              // a ptrace snapshot pass; the eBPF sampler's sync
	StageSampleReader              // the handling of one eBPF sample (a key-map refresh)
	StageReads                     // the host's cap of blocked reads reached: no process is read
	numStages
)

var stageNames = [numStages]string{"poll_round", "thread_reader", "sample_reader", "reads"}

func (s Stage) String() string {
	if s >= 0 && s < numStages {
		return stageNames[s]
	}
	return "unknown"
}

// Stuck is a stage busy for longer than the bound asked about.
type Stuck struct {
	Stage Stage
	For   time.Duration
}

// progress holds when each stage last began, 0 while it is idle. Safe for
// concurrent use; a nil progress records nothing.
type progress struct {
	since [numStages]atomic.Int64
}

func (p *progress) begin(s Stage) {
	if p != nil {
		p.since[s].Store(time.Now().UnixNano())
	}
}

func (p *progress) end(s Stage) {
	if p != nil {
		p.since[s].Store(0)
	}
}

// sourceProgress is what a thread source tells of its stages, in the
// watcher's.
type sourceProgress struct{ p *progress }

var sourceStages = [...]Stage{threadsource.StageReader: StageThreadReader, threadsource.StageSample: StageSampleReader}

func (s sourceProgress) Begin(st threadsource.Stage) { s.p.begin(sourceStages[st]) }
func (s sourceProgress) End(st threadsource.Stage)   { s.p.end(sourceStages[st]) }

// Stuck returns the stages busy for longer than bound now. A reader
// waiting on a read is not stuck for longer than the read timeout; past
// the host's cap of blocked reads, no process is read (StageReads), for
// as long as the oldest blocked read.
func (w *Watcher) Stuck(bound time.Duration) []Stuck {
	var out []Stuck
	now := time.Now().UnixNano()
	for s := range numStages {
		if at := w.progress.since[s].Load(); at != 0 && time.Duration(now-at) > bound {
			out = append(out, Stuck{Stage: s, For: time.Duration(now - at)})
		}
	}
	if st := remote.Stalls(); st.Hung >= remote.MaxHungTotal && time.Duration(st.OldestHungNs) > bound {
		out = append(out, Stuck{Stage: StageReads, For: time.Duration(st.OldestHungNs)})
	}
	return out
}

// stallTelemetry records what the read timeouts did (remote.Stalls) and
// which stages are stuck.
type stallTelemetry struct {
	tb       *processctxtel.TelemetryBuilder
	stalled  *processctxtel.Gauge // by stage
	timeouts uint64
}

// stalls is what the deadlines of both kinds of reads of another process
// did: of its memory (remote) and of its /proc files that take its mmap
// lock (lockread).
func stalls() remote.StallStats {
	st, l := remote.Stalls(), lockread.Stalls()
	st.Timeouts += l.Timeouts
	st.Refused += l.Refused
	st.Hung += l.Hung
	st.Quarantined += l.Quarantined
	return st
}

func newStallTelemetry(tb *processctxtel.TelemetryBuilder) *stallTelemetry {
	stages := make([]string, 0, numStages)
	for s := range numStages {
		stages = append(stages, s.String())
	}
	return &stallTelemetry{tb: tb, stalled: processctxtel.NewGauge(tb.ProcessctxStalled, "stage", stages...), timeouts: stalls().Timeouts}
}

// record records the stuck stages (the others 0) and the read timeouts'
// counts. Called by one goroutine at a time.
func (t *stallTelemetry) record(ctx context.Context, stuck []Stuck) {
	var on [numStages]int64
	for _, s := range stuck {
		on[s.Stage] = 1
	}
	for s := range numStages {
		t.stalled.Record(ctx, s.String(), on[s])
	}
	st := stalls()
	if st.Timeouts > t.timeouts {
		t.tb.ProcessctxReadTimeouts.Add(ctx, int64(st.Timeouts-t.timeouts))
		t.timeouts = st.Timeouts
	}
	t.tb.ProcessctxReadsHung.Record(ctx, int64(st.Hung))
	t.tb.ProcessctxProcessesQuarantined.Record(ctx, int64(st.Quarantined))
}

// RecordStalls records the stall telemetry for bound (the extension's
// health check calls it on its own schedule).
func (w *Watcher) RecordStalls(ctx context.Context, bound time.Duration) []Stuck {
	stuck := w.Stuck(bound)
	w.stalls.record(ctx, stuck)
	return stuck
}

// logStalls has the read timeouts logged, once per quarantine.
func logStalls(log *zap.Logger) {
	remote.OnStall(func(pid int, err error) {
		log.Warn("a read of a process's memory did not return: the process is not read for a while (a page of it waits on a FUSE server or a userfaultfd handler)",
			zap.Int("pid", pid), zap.Error(err))
	})
	lockread.OnStall(func(pid int, err error) {
		log.Warn("a read of a process's maps or pagemap did not return: the process holds its mmap lock; it is not read for a while",
			zap.Int("pid", pid), zap.Error(err))
	})
}

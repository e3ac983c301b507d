// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/attribution"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// ddRefusals maps the reasons internal/attribution refuses a DD slot for
// to those of otelcol_processctx_dd_slots_refused. A slot the kernel could
// not read (not resident) is not counted: usually nobody wrote it.
var ddRefusals = map[string]string{
	threadread.ReasonCollision:  ddSlotCollision,
	threadread.ReasonStaleOwner: ddSlotStale,
	attribution.ReasonUnlisted:  ddSlotUnlisted,
}

// newTracked returns the tracked state of p read through v (the zero
// Variable: none) and buf (nil: none), with the judge of its samples. The
// judge lists the threads of a process with a buffer: make it before the
// kernel reads the process.
func (t *EBPF) newTracked(p *publisher.Process, v schema.Variable, buf *publisher.Buffer) (*trackedProc, error) {
	var variable schema.Schema
	if v.Location != nil {
		variable = v.Schema
	}
	attr, err := attribution.NewProcess(attribution.Config{ID: p.ID, Variable: variable, Buffer: buf,
		KeyMap: p.Context.ThreadLocal.AttributeKeyMap, RefreshKeyMap: t.tel.keyMapRefresher(t.log, p, t.limits),
		Now: t.now, Observe: t.observe})
	if err != nil {
		return nil, err
	}
	return &trackedProc{proc: p, v: v, buf: buf, attr: attr}, nil
}

// onSample runs on the sampler's Run goroutine, for every sample.
func (t *EBPF) onSample(smp sampler.Sample) {
	ctx := context.Background()
	t.tel.tb.ProcessctxThreadSamples.Add(ctx, 1)
	if smp.Followed {
		t.tel.tb.ProcessctxThreadSamplesFollowed.Add(ctx, 1)
	}
	t.mu.RLock()
	tp := t.tracked[smp.PID]
	t.mu.RUnlock()
	if tp == nil {
		return // untracked since the kernel took it
	}
	t.progress.Begin(StageSample)
	tp.attr.Add(smp)
	t.progress.End(StageSample)
}

// observe writes an observation to the catalog, under the identity the
// recipe was made for (if the PID changed hands since, the catalog refuses
// it), or counts why it says nothing.
func (t *EBPF) observe(id publisher.ProcessID, o attribution.Observation) {
	if !o.Refused() {
		if o.Record != nil {
			t.tel.invalid(context.Background(), o.Record.Record.InvalidUTF8)
		}
		t.catalog.ObserveFor(id, o.TID, o.Time, o.Record, o.Exact)
		return
	}
	ctx := context.Background()
	if o.Reason == attribution.ReasonParse {
		t.tel.fail(ctx, reasonParse, 1)
		return
	}
	if r, ok := ddRefusals[o.Reason]; ok {
		t.tel.refused(ctx, r, 1)
	}
}

// flushSamples delivers the samples that waited long enough for a thread
// listing (attribution.Process.Tick); the sync goroutine calls it every
// attribution.DefaultListEvery while a tracked process has a buffer.
func (t *EBPF) flushSamples() {
	t.mu.RLock()
	procs := make([]*attribution.Process, 0, len(t.tracked))
	for _, tp := range t.tracked {
		if tp.buf != nil {
			procs = append(procs, tp.attr)
		}
	}
	t.mu.RUnlock()
	for _, p := range procs {
		p.Tick()
	}
}

// hasBuffer reports whether a tracked process has a buffer (its samples
// wait for listings).
func (t *EBPF) hasBuffer() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, tp := range t.tracked {
		if tp.buf != nil {
			return true
		}
	}
	return false
}

// onPrctl hands a PID that just named a mapping (a process context being
// published or updated) to the poll goroutine, never blocking the sampler.
func (t *EBPF) onPrctl(pid int) {
	select {
	case t.rescan <- pid: // counted by the poll goroutine, once per round
	default:
	}
}

// trackFailed logs a process the judge could not be made for (it exited
// before its threads could be listed).
func (t *EBPF) trackFailed(pid int, err error) {
	t.log.Debug("eBPF sampler: process not tracked", zap.Int("pid", pid), zap.Error(err))
}

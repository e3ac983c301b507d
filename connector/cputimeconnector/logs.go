// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/connector/cputimeconnector/internal/metadata"
	"github.com/otelctx/otelctx/internal/cputime"
)

// Names on the span records.
const (
	EventName        = "profiles.span.cpu_time"
	AttrCPUTime      = "profile.cpu.time"      // seconds (double)
	AttrSampleCount  = "profile.sample.count"  // int
	AttrTopFunctions = "profile.top_functions" // [{function, samples}]
	otherFunctions   = "(other)"
)

// spanAgg is the logs output's aggregate: the interval's span records (at
// most span_records.max_per_interval), flushed every
// span_records.flush_interval.
type spanAgg struct {
	cfg  *Config
	next consumer.Logs
	// scratch reuses messages' local aggregates between calls.
	scratch sync.Pool

	mu    sync.Mutex // guards the rest
	spans map[[24]byte]*spanRecord
	// frames numbers the leaf frames the records count (at most
	// maxLeavesPerSpan a record); id 0, the empty frame, is (other).
	frames cputime.Frames
	// placeOf: per frame id, 1 + its place in the leaves of the record
	// being merged, else 0.
	placeOf []int32
}

type spanRecord struct {
	resKey      string
	resAttrs    []kv
	dims        []kv
	trace       pcommon.TraceID
	span        pcommon.SpanID
	cpu, n      int64
	first, last uint64
	leaves      []leafCount // at most maxLeavesPerSpan, in the order first seen
	other       int64       // samples of further leaves
}

type leafCount struct {
	frame int32 // id in spanAgg.frames
	n     int64
}

func newSpanAgg(cfg *Config, next consumer.Logs) *spanAgg {
	return &spanAgg{cfg: cfg, next: next, spans: map[[24]byte]*spanRecord{}}
}

func (*spanAgg) signal() signal            { return signalLogs }
func (a *spanAgg) interval() time.Duration { return a.cfg.SpanRecords.FlushInterval }

func (a *spanAgg) consume(pd pprofile.Profiles, _ func() time.Time) counts {
	m, _ := a.scratch.Get().(*spanMessage)
	if m == nil {
		m = &spanMessage{}
		m.rd.SetKeys(dimensionNames(a.cfg), false) // a span's first sample's dimensions
	}
	m.read(a.cfg, pd)
	a.mu.Lock()
	a.merge(m)
	a.mu.Unlock()
	cnt := m.counts
	if m.reusable() {
		a.scratch.Put(m)
	}
	return cnt
}

// merge adds a message's local spans to the interval's records.
func (a *spanAgg) merge(m *spanMessage) {
	m.recs = m.recs[:0]
	for i := range m.perSpan {
		ls := &m.perSpan[i]
		tr, sp := m.rd.Link(ls.link)
		var k [24]byte
		copy(k[:16], tr[:])
		copy(k[16:], sp[:])
		r := a.spans[k]
		if r == nil {
			if len(a.spans) >= a.cfg.SpanRecords.MaxPerInterval {
				m.counts.folded++
				m.recs = append(m.recs, nil)
				continue
			}
			res := m.resources[ls.key.res]
			dims, _ := m.dims(a.cfg, ls.key)
			r = &spanRecord{resKey: res.key, resAttrs: res.attrs, dims: slices.Clone(dims), trace: tr, span: sp, first: ls.first}
			a.spans[k] = r
		}
		r.cpu += ls.cpu
		r.n += ls.n
		if ls.first != 0 && (r.first == 0 || ls.first < r.first) {
			r.first = ls.first
		}
		r.last = max(r.last, ls.last)
		m.recs = append(m.recs, r)
	}
	if m.topFunctions {
		a.mergeLeaves(m)
	}
	clear(m.recs) // the scratch keeps no record alive past its flush
}

// mergeLeaves counts the leaves of each local span's samples into its
// record: each sample's frame found by its place in the record (placeOf),
// not by a search.
func (a *spanAgg) mergeLeaves(m *spanMessage) {
	n := max(m.rd.StackCount(), 1)
	m.leafOf = slices.Grow(m.leafOf[:0], n)[:n]
	clear(m.leafOf)
	for i, r := range m.recs {
		if r == nil {
			continue
		}
		for j, l := range r.leaves {
			a.placeOf[l.frame] = int32(j + 1)
		}
		for k := m.perSpan[i].firstLeaf; k >= 0; k = m.leafSamples[k].next {
			ls := &m.leafSamples[k]
			room := len(r.leaves) < maxLeavesPerSpan
			id, ok := m.leafID(&a.frames, ls.stack, room)
			if !ok && m.leafOf[ls.stack] == leafNone {
				continue
			}
			if int(id) >= len(a.placeOf) {
				a.placeOf = append(a.placeOf, make([]int32, a.frames.Len()-len(a.placeOf))...)
			}
			switch {
			case ok && id > 0 && a.placeOf[id] > 0:
				r.leaves[a.placeOf[id]-1].n += ls.n
			case ok && id > 0 && room:
				r.leaves = append(r.leaves, leafCount{id, ls.n})
				a.placeOf[id] = int32(len(r.leaves))
			default: // the empty frame, or a leaf past the record's bound
				r.other += ls.n
			}
		}
		for _, l := range r.leaves {
			a.placeOf[l.frame] = 0
		}
	}
}

func (a *spanAgg) flush(ctx context.Context, now time.Time) error {
	a.mu.Lock()
	ld, n := a.take(now)
	a.mu.Unlock()
	if n == 0 {
		return nil
	}
	return a.next.ConsumeLogs(ctx, ld)
}

// take returns the interval's span records (n of them) and forgets them.
func (a *spanAgg) take(now time.Time) (plog.Logs, int) {
	cfg := a.cfg
	ld := plog.NewLogs()
	recs := make([]*spanRecord, 0, len(a.spans))
	for _, r := range a.spans {
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(x, y *spanRecord) int {
		return cmp.Or(cmp.Compare(x.resKey, y.resKey), cmp.Compare(x.first, y.first),
			slices.Compare(x.span[:], y.span[:]))
	})
	var lrs plog.LogRecordSlice
	lastRes := "\xff"
	for _, r := range recs {
		if r.resKey != lastRes {
			lastRes = r.resKey
			rl := ld.ResourceLogs().AppendEmpty()
			for _, kv := range r.resAttrs {
				rl.Resource().Attributes().PutStr(kv.key, kv.value)
			}
			sl := rl.ScopeLogs().AppendEmpty()
			sl.Scope().SetName(metadata.ScopeName)
			lrs = sl.LogRecords()
		}
		lr := lrs.AppendEmpty()
		lr.SetEventName(EventName)
		lr.SetTimestamp(pcommon.Timestamp(r.last))
		lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(now))
		lr.SetTraceID(r.trace)
		lr.SetSpanID(r.span)
		lr.SetSeverityNumber(plog.SeverityNumberInfo)
		secs := float64(r.cpu) / 1e9
		lr.Body().SetStr(fmt.Sprintf("span used %.3f s of CPU (%d samples)", secs, r.n))
		at := lr.Attributes()
		at.PutDouble(AttrCPUTime, secs)
		at.PutInt(AttrSampleCount, r.n)
		for _, d := range r.dims {
			at.PutStr(d.key, d.value)
		}
		if top := cfg.SpanRecords.TopFunctions; top > 0 && (len(r.leaves) > 0 || r.other > 0) {
			leaves := r.leaves
			if r.other > 0 {
				leaves = append(leaves, leafCount{0, r.other})
			}
			// The top N once per record and interval; ties in the order
			// first seen, (other) last.
			slices.SortStableFunc(leaves, func(x, y leafCount) int { return cmp.Compare(y.n, x.n) })
			fs := at.PutEmptySlice(AttrTopFunctions)
			for _, l := range leaves[:min(top, len(leaves))] {
				m := fs.AppendEmpty().SetEmptyMap()
				m.PutStr("function", frameName(a.frames.Frame(l.frame)))
				m.PutInt("samples", l.n)
			}
		}
	}
	clear(a.spans)
	a.frames.Reset()
	return ld, len(recs)
}

// frameName is a function's name, or for an unsymbolized frame its file's
// base name and address, or (other) for the folded rest.
func frameName(f cputime.Frame) string {
	switch {
	case f.Function != "":
		return f.Function
	case f.Mapping != "" || f.Address != 0:
		return fmt.Sprintf("%s+%#x", path.Base(f.Mapping), f.Address)
	}
	return otherFunctions
}

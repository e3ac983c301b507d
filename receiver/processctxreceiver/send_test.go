// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/otelctx/otelctx/internal/entityevents"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
	"github.com/otelctx/otelctx/internal/watcher"
	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

// blockingLogs accepts nothing until its caller's context is done.
func blockingLogs(calls chan<- struct{}) consumer.Logs {
	c, _ := consumer.NewLogs(func(ctx context.Context, _ plog.Logs) error {
		select {
		case calls <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return ctx.Err()
	})
	return c
}

func waitCall(t *testing.T, calls <-chan struct{}) {
	t.Helper()
	select {
	case <-calls:
	case <-time.After(testenv.WaitTimeout):
		t.Fatalf("no ConsumeLogs call within %v", testenv.WaitTimeout)
	}
}

// TestBlockedPipelineDropsEvents: with the pipeline blocked, the queue
// fills up to its bound in bytes and what does not fit is counted, without
// blocking the caller; a round larger than the bound still goes into an
// empty queue; closing drops what is left and returns.
func TestBlockedPipelineDropsEvents(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	set := receivertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	calls := make(chan struct{}, 1)
	r, err := newReceiver(set, createDefaultConfig().(*Config), blockingLogs(calls))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := newSender(ctx, r)
	events := func(n int) batch {
		l := plog.NewLogs()
		lrs := l.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
		for range n {
			lrs.AppendEmpty().Attributes().PutStr(attrEventType, entityevents.EventTypeState)
		}
		return batch{logs: l, counts: map[string]int64{entityevents.EventTypeState: int64(n)}}
	}
	size := logsSize(events(1).logs)
	const fit = 10
	s.limit = fit * size
	s.enqueue(ctx, events(1))
	waitCall(t, calls) // the sender holds the first batch in ConsumeLogs
	for range fit + 3 {
		s.enqueue(ctx, events(1))
	}
	dropped := func() int64 { return telemetrytest.Sum(tel, "otelcol_processctx_entity_events_dropped", "reason", "") }
	if n := dropped(); n != 3 {
		t.Errorf("dropped = %d with the queue full, want 3", n)
	}
	if s.queued != fit*size {
		t.Errorf("queued %d bytes, want %d", s.queued, fit*size)
	}
	// A round larger than the bound: dropped while others wait ...
	s.enqueue(ctx, events(2*fit))
	if n := dropped(); n != 3+2*fit {
		t.Errorf("dropped = %d, want %d", n, 3+2*fit)
	}
	// ... queued alone.
	s.mu.Lock()
	s.queue, s.queued = nil, 0
	s.mu.Unlock()
	s.enqueue(ctx, events(2*fit))
	if n := dropped(); n != 3+2*fit {
		t.Errorf("a round larger than the bound dropped from an empty queue (dropped = %d)", n)
	}
	cancel()
	if err := s.close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := dropped(); n != 3+4*fit {
		t.Errorf("dropped = %d after close, want %d (the queue's too)", n, 3+4*fit)
	}
}

// TestLogsSize: the estimate counts every value, nested ones too.
func TestLogsSize(t *testing.T) {
	l := plog.NewLogs()
	a := l.ResourceLogs().AppendEmpty().Resource().Attributes()
	base := logsSize(l)
	a.PutStr("k", "0123456789")
	s := a.PutEmptySlice("s")
	for range 100 {
		s.AppendEmpty().SetEmptySlice().AppendEmpty()
	}
	if got, want := logsSize(l)-base, 1+10+pdataValueSize+1+pdataValueSize+100*2*pdataValueSize; got != want {
		t.Errorf("logsSize grew by %d, want %d", got, want)
	}
}

// TestSplitRound: a round of resources larger than the chunk is handed on
// in parts of at most the chunk, in order, every record once; a resource
// larger than the chunk is a part alone; a round that fits is one part.
func TestSplitRound(t *testing.T) {
	l := plog.NewLogs()
	for i, kb := range []int{600, 600, 600, 2500, 100, 900} {
		rl := l.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutInt("i", int64(i))
		rl.Resource().Attributes().PutStr("v", strings.Repeat("v", kb<<10))
		rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	}
	const limit = 2 << 20
	parts := split(l, logsSize(l), limit)
	var order []int64
	for _, p := range parts {
		if n := logsSize(p); n > limit && p.ResourceLogs().Len() > 1 {
			t.Errorf("a part of %d resources holds %d bytes, over %d", p.ResourceLogs().Len(), n, limit)
		}
		for _, rl := range p.ResourceLogs().All() {
			v, _ := rl.Resource().Attributes().Get("i")
			order = append(order, v.Int())
		}
	}
	if len(parts) != 3 || !slices.Equal(order, []int64{0, 1, 2, 3, 4, 5}) {
		t.Errorf("%d parts, resources %v; want 3 parts ([0 1 2] [3] [4 5])", len(parts), order)
	}
	small := plog.NewLogs()
	small.ResourceLogs().AppendEmpty()
	if parts := split(small, logsSize(small), limit); len(parts) != 1 || parts[0].ResourceLogs().Len() != 1 {
		t.Errorf("a small round split into %d parts", len(parts))
	}
}

// TestBlockedPipelineHoldsNoRound: a logs pipeline that accepts nothing
// does not hold the extension: a publisher that starts while it blocks
// still reaches the catalog, and Shutdown returns.
func TestBlockedPipelineHoldsNoRound(t *testing.T) {
	a := testpub.Start(t, testpub.Glibc)
	a.Set("service.name", "a")
	a.Publish()
	b := testpub.Start(t, testpub.Glibc)
	t.Parallel()
	set := receivertest.NewNopSettings(metadata.Type)
	w := watchertest.Start(t, watcher.Settings{Logger: set.Logger}, watchertest.FastConfig(a.PID, b.PID))
	calls := make(chan struct{}, 1)
	rcv, err := NewFactory().CreateLogs(context.Background(), set, createDefaultConfig(), blockingLogs(calls))
	if err != nil {
		t.Fatal(err)
	}
	host := watchertest.NewHost().Add(component.MustNewID("process_ctx"), w)
	if err := rcv.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	waitCall(t, calls) // a's events are held downstream
	b.Set("service.name", "b")
	b.Publish()
	eventually(t, "b in the catalog while the pipeline blocks", func() bool {
		_, ok := w.Catalog().Process(b.PID)
		return ok
	})
	if err := rcv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestShutdownGivesUpOnStuckConsumer: a consumer that ignores
// cancellation keeps its call, not Shutdown, which returns at its
// context's end with an error.
func TestShutdownGivesUpOnStuckConsumer(t *testing.T) {
	set := receivertest.NewNopSettings(metadata.Type)
	calls, release := make(chan struct{}, 1), make(chan struct{})
	stuck, _ := consumer.NewLogs(func(context.Context, plog.Logs) error {
		select {
		case calls <- struct{}{}:
		default:
		}
		<-release
		return nil
	})
	r, err := newReceiver(set, createDefaultConfig().(*Config), stuck)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := newSender(ctx, r)
	l := plog.NewLogs()
	l.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	s.enqueue(ctx, batch{logs: l})
	waitCall(t, calls)
	cancel()
	done, stop := context.WithCancel(context.Background())
	stop()
	if err := s.close(done); err == nil {
		t.Error("close returned no error while the consumer holds its call")
	}
	close(release) // the consumer returns: the sender's goroutine ends (goleak)
	s.done.Wait()
}

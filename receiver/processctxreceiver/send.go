// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.uber.org/zap"
)

// sendQueueBytes bounds the estimated memory (logsSize) of the rounds of
// entity events waiting for the logs pipeline. The rounds are built on the
// extension's poll goroutine, which also feeds discovery and the catalog
// ctx_enrich reads: a slow or blocked pipeline must cost entity events
// (counted), never those, nor more memory than this.
const sendQueueBytes = 16 << 20

// sendChunkBytes bounds what one ConsumeLogs call carries (logsSize): a
// round of many large contexts (up to the extension's
// limits.max_process_memory) is handed on in parts, so that an exporter's
// encoding of one call stays small beside the agent's memory limit.
const sendChunkBytes = 2 << 20

type batch struct {
	logs   plog.Logs
	counts map[string]int64
	size   int // logsSize, set by enqueue
}

// sender hands rounds' events to the pipeline from its own goroutine.
type sender struct {
	r     *processctxReceiver
	limit int // sendQueueBytes (tests: less)
	done  sync.WaitGroup
	wake  chan struct{} // one pending signal: the queue changed or closed

	mu     sync.Mutex
	queue  []batch
	queued int // bytes, the sum of the queue's sizes
	closed bool
	// warned: the first drop is logged at Warn, later ones are counted.
	warned bool
}

func newSender(ctx context.Context, r *processctxReceiver) *sender {
	s := &sender{r: r, limit: sendQueueBytes, wake: make(chan struct{}, 1)}
	s.done.Add(1)
	go s.run(ctx)
	return s
}

// enqueue runs on the poll goroutine and never blocks. A round that does
// not fit beside the queued ones is dropped; into an empty queue any round
// fits (its size is bounded by the publishers' context budgets).
func (s *sender) enqueue(ctx context.Context, b batch) {
	b.size = logsSize(b.logs)
	s.mu.Lock()
	if s.queued > 0 && s.queued+b.size > s.limit {
		warn := !s.warned
		s.warned = true
		s.mu.Unlock()
		n := b.logs.LogRecordCount()
		s.r.tel.recordDropped(ctx, n)
		if warn {
			s.r.set.Logger.Warn("entity events dropped: the logs pipeline is not keeping up (otelcol_processctx_entity_events_dropped counts them)",
				zap.Int("records", n), zap.Int("queued_bytes", s.limit))
		}
		return
	}
	s.queue = append(s.queue, b)
	s.queued += b.size
	s.mu.Unlock()
	s.signal()
}

func (s *sender) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// next waits for the oldest queued round; false once closed and drained.
func (s *sender) next() (batch, bool) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			b := s.queue[0]
			s.queue[0] = batch{}
			s.queue = s.queue[1:]
			s.queued -= b.size
			s.mu.Unlock()
			return b, true
		}
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return batch{}, false
		}
		<-s.wake
	}
}

func (s *sender) run(ctx context.Context) {
	defer s.done.Done()
	for {
		b, ok := s.next()
		if !ok {
			return
		}
		n := b.logs.LogRecordCount()
		if ctx.Err() != nil {
			s.r.tel.recordDropped(context.Background(), n) // shutting down
			continue
		}
		s.r.tel.recordEvents(ctx, b.counts)
		parts := split(b.logs, b.size, sendChunkBytes)
		for i, part := range parts {
			parts[i] = plog.Logs{} // sent parts are not kept for the rest
			n := part.LogRecordCount()
			opCtx := s.r.obsrecv.StartLogsOp(ctx)
			err := s.r.next.ConsumeLogs(opCtx, part)
			s.r.obsrecv.EndLogsOp(opCtx, "", n, err)
			if err != nil && !errors.Is(err, context.Canceled) {
				s.r.set.Logger.Warn("entity events not accepted downstream", zap.Int("records", n), zap.Error(err))
			}
		}
	}
}

// split moves l's resources, in order, into parts of at most limit bytes
// (logsSize; a resource larger than that is a part alone); l, of size
// bytes, is returned whole when it fits.
func split(l plog.Logs, size, limit int) []plog.Logs {
	if size <= limit {
		return []plog.Logs{l}
	}
	var parts []plog.Logs
	cur, curSize := plog.NewLogs(), 0
	rls := l.ResourceLogs()
	for i := range rls.Len() {
		rl := rls.At(i)
		n := resourceLogsSize(rl)
		if curSize > 0 && curSize+n > limit {
			parts = append(parts, cur)
			cur, curSize = plog.NewLogs(), 0
		}
		rl.MoveTo(cur.ResourceLogs().AppendEmpty())
		curSize += n
	}
	if curSize > 0 || len(parts) == 0 {
		parts = append(parts, cur)
	}
	return parts
}

// close stops the sender once the queue is drained (what is still queued
// is dropped, the receiver's context being done); no enqueue may follow.
// It gives up at ctx's end: a consumer that ignores cancellation keeps its
// call, not the collector's shutdown.
func (s *sender) close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
	stopped := make(chan struct{})
	go func() { s.done.Wait(); close(stopped) }()
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("process_ctx receiver: the logs pipeline has not returned: %w", ctx.Err())
	}
}

// What entity events cost in pdata, estimated: each value (its AnyValue,
// boxed oneof and the slot holding it) and each log record, besides the
// bytes of keys and strings.
const (
	pdataValueSize  = 64
	pdataRecordSize = 256
)

func logsSize(l plog.Logs) int {
	n := 0
	rls := l.ResourceLogs()
	for i := range rls.Len() {
		n += resourceLogsSize(rls.At(i))
	}
	return n
}

func resourceLogsSize(rl plog.ResourceLogs) int {
	n := pdataRecordSize + mapSize(rl.Resource().Attributes())
	sls := rl.ScopeLogs()
	for j := range sls.Len() {
		lrs := sls.At(j).LogRecords()
		for k := range lrs.Len() {
			n += pdataRecordSize + mapSize(lrs.At(k).Attributes())
		}
	}
	return n
}

func mapSize(m pcommon.Map) int {
	n := 0
	for k, v := range m.All() {
		n += len(k) + valueSize(v)
	}
	return n
}

func valueSize(v pcommon.Value) int {
	n := pdataValueSize
	switch v.Type() {
	case pcommon.ValueTypeStr:
		n += len(v.Str())
	case pcommon.ValueTypeBytes:
		n += v.Bytes().Len()
	case pcommon.ValueTypeSlice:
		s := v.Slice()
		for i := range s.Len() {
			n += valueSize(s.At(i))
		}
	case pcommon.ValueTypeMap:
		n += mapSize(v.Map())
	}
	return n
}

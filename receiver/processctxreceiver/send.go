package processctxreceiver

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.uber.org/zap"
)

// sendQueueLen bounds the rounds of entity events waiting for the logs
// pipeline. The rounds are built on the extension's poll goroutine, which
// also feeds discovery and the catalog ctxenrich reads: a slow or blocked
// pipeline must cost entity events (counted), never those.
const sendQueueLen = 256

type batch struct {
	logs   plog.Logs
	counts map[string]int64
}

// sender hands rounds' events to the pipeline from its own goroutine.
type sender struct {
	r     *processctxReceiver
	queue chan batch
	done  sync.WaitGroup
	// warned: the first drop is logged at Warn, later ones are counted.
	warned bool
}

func newSender(ctx context.Context, r *processctxReceiver) *sender {
	s := &sender{r: r, queue: make(chan batch, sendQueueLen)}
	s.done.Add(1)
	go s.run(ctx)
	return s
}

// enqueue runs on the poll goroutine and never blocks.
func (s *sender) enqueue(ctx context.Context, b batch) {
	select {
	case s.queue <- b:
	default:
		n := b.logs.LogRecordCount()
		s.r.tel.recordDropped(ctx, n)
		if !s.warned {
			s.warned = true
			s.r.set.Logger.Warn("entity events dropped: the logs pipeline is not keeping up (otelcol_processctx_entity_events_dropped counts them)",
				zap.Int("records", n), zap.Int("queue", sendQueueLen))
		}
	}
}

func (s *sender) run(ctx context.Context) {
	defer s.done.Done()
	for b := range s.queue {
		n := b.logs.LogRecordCount()
		if ctx.Err() != nil {
			s.r.tel.recordDropped(context.Background(), n) // shutting down
			continue
		}
		s.r.tel.recordEvents(ctx, b.counts)
		opCtx := s.r.obsrecv.StartLogsOp(ctx)
		err := s.r.next.ConsumeLogs(opCtx, b.logs)
		s.r.obsrecv.EndLogsOp(opCtx, "", n, err)
		if err != nil && !errors.Is(err, context.Canceled) {
			s.r.set.Logger.Warn("entity events not accepted downstream", zap.Int("records", n), zap.Error(err))
		}
	}
}

// close stops the sender once the queue is drained (what is still queued
// is dropped, the receiver's context being done); no enqueue may follow.
// It gives up at ctx's end: a consumer that ignores cancellation keeps its
// call, not the collector's shutdown.
func (s *sender) close(ctx context.Context) error {
	close(s.queue)
	stopped := make(chan struct{})
	go func() { s.done.Wait(); close(stopped) }()
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("processctx receiver: the logs pipeline has not returned: %w", ctx.Err())
	}
}

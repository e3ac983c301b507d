// SPDX-License-Identifier: Apache-2.0

package decodebudgetextension

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/otelctx/otelctx/extension/decodebudgetextension/internal/metadata"
)

// Refusal reasons (the reason attribute of decode_budget_refused).
const (
	reasonElements  = "elements"
	reasonMalformed = "malformed"
)

// requestKinds are the types the OTLP gRPC services decode a request into
// (pdata's internal Export*ServiceRequest), by name since they cannot be
// imported (TestServers checks they still are), and the walk's root for
// each. Metrics requests are not walked: only the byte budget applies.
const requestPkg = "go.opentelemetry.io/collector/pdata/internal"

var requestKinds = map[string]msgKind{
	"ExportProfilesServiceRequest": kRequest,
	"ExportTraceServiceRequest":    kTracesRequest,
	"ExportLogsServiceRequest":     kLogsRequest,
}

// requestKind is the walk's root for v, kNone when v is not walked.
func requestKind(v any) msgKind {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().PkgPath() != requestPkg {
		return kNone
	}
	return requestKinds[t.Elem().Name()]
}

// codec wraps the "proto" codec: before a message is decoded it counts a
// profiles, traces or logs request's elements (refused past maxElements)
// and takes its wire bytes from the budget shared by every stream of every
// server that uses the extension, so that what is being decoded at once is
// bounded.
type codec struct {
	delegate    encoding.CodecV2
	budget      *budget
	maxElements int
	telemetry   *metadata.TelemetryBuilder
	logger      *zap.Logger
	// refused holds the requests left undecoded, until the unary
	// interceptor (run in the same call, right after decoding) answers
	// them: a codec's error always reaches the client as Internal. An
	// interceptor chained before it (auth) may refuse the call first: at
	// maxPendingRefusals the entries so left are dropped (such a request,
	// undecoded, is empty to any handler).
	refusedMu sync.Mutex
	refused   map[any]*status.Status
}

func (c *codec) Name() string { return "proto" }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) { return c.delegate.Marshal(v) }

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	size := data.Len()
	root := requestKind(v)
	if root == kNone {
		c.budget.acquire(c.weight(size))
		defer c.budget.release(c.weight(size))
		return c.delegate.Unmarshal(data, v)
	}
	// One contiguous buffer (pdata's codec makes one too; given a single
	// buffer it takes a reference rather than a copy).
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	_, err := countElementsOf(buf.ReadOnlyData(), root, c.maxElements)
	if err != nil {
		reason, code := reasonMalformed, codes.InvalidArgument
		msg := fmt.Sprintf("decode_budget: refused a %d-byte message before decoding: %v", size, err)
		if err == errTooMany {
			reason, code = reasonElements, codes.ResourceExhausted
			msg = fmt.Sprintf("decode_budget: refused a %d-byte message before decoding: more than max_elements (%d) elements", size, c.maxElements)
		}
		c.telemetry.DecodeBudgetRefused.Add(context.Background(), 1,
			metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", reason))))
		c.logger.Debug("OTLP message refused before decoding",
			zap.String("reason", reason), zap.Int("bytes", size), zap.Error(err))
		c.refuse(v, status.New(code, msg))
		return nil
	}
	w := c.weight(size)
	if c.budget.acquire(w) {
		c.telemetry.DecodeBudgetWaits.Add(context.Background(), 1)
	}
	defer c.budget.release(w)
	return c.delegate.Unmarshal(mem.BufferSlice{buf}, v)
}

// maxPendingRefusals bounds the refusals waiting for the interceptor.
const maxPendingRefusals = 1024

func (c *codec) refuse(req any, st *status.Status) {
	c.refusedMu.Lock()
	defer c.refusedMu.Unlock()
	if c.refused == nil || len(c.refused) >= maxPendingRefusals {
		c.refused = map[any]*status.Status{}
	}
	c.refused[req] = st
}

// weight is what a message takes from the budget: its size, at most the
// whole budget (a larger message decodes alone).
func (c *codec) weight(size int) int64 {
	return min(int64(size), c.budget.size)
}

// intercept answers a request the codec refused, before any handler sees
// its (empty) request.
func (c *codec) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c.refusedMu.Lock()
	st, ok := c.refused[req]
	delete(c.refused, req)
	c.refusedMu.Unlock()
	if ok {
		return nil, st.Err()
	}
	return handler(ctx, req)
}

// budget is a weighted semaphore of bytes, served in arrival order: a
// large message waiting is not overtaken for ever by small ones.
type budget struct {
	size int64
	mu   sync.Mutex
	cond sync.Cond
	used int64
	// next is the ticket the next acquire takes, serving the one whose
	// turn it is.
	next, serving uint64
	// waiting: acquires blocked now (tests wait on it).
	waiting int
}

func newBudget(size int64) *budget {
	b := &budget{size: size}
	b.cond.L = &b.mu
	return b
}

// acquire takes n bytes, waiting until they are free; whether it waited.
func (b *budget) acquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	ticket := b.next
	b.next++
	waited := false
	for ticket != b.serving || b.used+n > b.size {
		waited = true
		b.waiting++
		b.cond.Wait()
		b.waiting--
	}
	b.used += n
	b.serving++
	b.cond.Broadcast() // the next in line may fit too
	return waited
}

func (b *budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
	b.cond.Broadcast()
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package decodebudgetextension

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/otelctx/otelctx/extension/decodebudgetextension/internal/metadata"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
)

const profilesExport = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"

// rawCodec sends a message's bytes as they are (the test's hostile client).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// profilesSink counts the samples the profiles service was given.
type profilesSink struct {
	pprofileotlp.UnimplementedGRPCServer
	mu      sync.Mutex
	samples int
	calls   int
}

func (s *profilesSink) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	rps := req.Profiles().ResourceProfiles()
	for i := range rps.Len() {
		sps := rps.At(i).ScopeProfiles()
		for j := range sps.Len() {
			ps := sps.At(j).Profiles()
			for k := range ps.Len() {
				s.samples += ps.At(k).Samples().Len()
			}
		}
	}
	return pprofileotlp.NewExportResponse(), nil
}

// serve runs pdata's OTLP profiles gRPC service (what the OTLP receiver
// registers) with the extension's server options, as configgrpc applies
// them; a client connection to it.
func serve(t *testing.T, ext extension.Extension, sink *profilesSink) *grpc.ClientConn {
	t.Helper()
	opts, err := ext.(interface {
		GetGRPCServerOptions(context.Context) ([]grpc.ServerOption, error)
	}).GetGRPCServerOptions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(4<<20))...)
	pprofileotlp.RegisterGRPCServer(srv, sink)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallSendMsgSize(4<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); srv.Stop(); <-done })
	return conn
}

func export(conn *grpc.ClientConn, msg []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var resp []byte
	return conn.Invoke(ctx, profilesExport, &msg, &resp)
}

// TestProfilesServer: through pdata's profiles service, the bomb just
// under 1 MiB is refused with ResourceExhausted and malformed input with
// InvalidArgument, before the service sees them, both counted by reason;
// a profiler's message goes through whole; the budget is free afterwards.
func TestProfilesServer(t *testing.T) {
	tel := componenttest.NewTelemetry()
	defer func() { _ = tel.Shutdown(context.Background()) }()
	set := extensiontest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	f := NewFactory()
	ext, err := f.Create(context.Background(), set, f.CreateDefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ext.Shutdown(context.Background()) }()
	sink := &profilesSink{}
	conn := serve(t, ext, sink)

	if err := export(conn, emptySampleBomb(524_280)); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("bomb: %v, want ResourceExhausted", err)
	}
	if err := export(conn, []byte{1<<3 | 2, 5, 0}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("malformed: %v, want InvalidArgument", err)
	}
	if err := export(conn, profilerMessage(t, 8)); err != nil {
		t.Errorf("profiler message: %v", err)
	}
	if sink.calls != 1 || sink.samples != 800 {
		t.Errorf("the service got %d calls, %d samples; want 1, 800", sink.calls, sink.samples)
	}
	if got := telemetrytest.Sum(tel, "otelcol_decode_budget_refused", "reason", reasonElements); got != 1 {
		t.Errorf("refused for elements: %d, want 1", got)
	}
	if got := telemetrytest.Sum(tel, "otelcol_decode_budget_refused", "reason", reasonMalformed); got != 1 {
		t.Errorf("refused as malformed: %d, want 1", got)
	}
	b := ext.(*decodeBudget).budget
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used != 0 {
		t.Errorf("%d bytes of the budget still taken", b.used)
	}
	cnt := 0
	ext.(*decodeBudget).refusedCount(&cnt)
	if cnt != 0 {
		t.Errorf("%d refused requests left unanswered", cnt)
	}
}

// TestBudgetSerialises: with a budget of one message, a second decode waits
// until the first releases it (and is counted as having waited).
func TestBudgetSerialises(t *testing.T) {
	b := newBudget(100)
	if b.acquire(100) {
		t.Fatal("the first acquire waited")
	}
	got := make(chan bool)
	go func() { got <- b.acquire(60) }()
	// Released once the second is blocked on it.
	deadline := time.Now().Add(time.Minute)
	for {
		b.mu.Lock()
		w := b.waiting
		b.mu.Unlock()
		if w == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second acquire never blocked")
		}
		runtime.Gosched()
	}
	b.release(100)
	if waited := <-got; !waited {
		t.Error("the second acquire did not wait")
	}
	b.release(60)
	if b.acquire(100) {
		t.Error("an acquire of a free budget waited")
	}
}

// traceSink and logSink count what the traces and logs services were given.
type traceSink struct {
	ptraceotlp.UnimplementedGRPCServer
	spans atomic.Int64
}

func (s *traceSink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	s.spans.Add(int64(req.Traces().SpanCount()))
	return ptraceotlp.NewExportResponse(), nil
}

type logSink struct {
	plogotlp.UnimplementedGRPCServer
	records atomic.Int64
}

func (s *logSink) Export(_ context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	s.records.Add(int64(req.Logs().LogRecordCount()))
	return plogotlp.NewExportResponse(), nil
}

// TestTracesAndLogsServers: through pdata's traces and logs services, a
// message of empty spans or records past max_elements (also under the
// deprecated scope field 1000) is refused with ResourceExhausted before
// the service sees it; an ordinary one goes through.
func TestTracesAndLogsServers(t *testing.T) {
	tel := componenttest.NewTelemetry()
	defer func() { _ = tel.Shutdown(context.Background()) }()
	set := extensiontest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.MaxElements = 1000
	ext, err := f.Create(context.Background(), set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ext.Shutdown(context.Background()) }()
	opts, err := ext.(interface {
		GetGRPCServerOptions(context.Context) ([]grpc.ServerOption, error)
	}).GetGRPCServerOptions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	ts, ls := &traceSink{}, &logSink{}
	ptraceotlp.RegisterGRPCServer(srv, ts)
	plogotlp.RegisterGRPCServer(srv, ls)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	defer func() { srv.Stop(); <-done }()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func(method string, msg []byte) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var resp []byte
		return conn.Invoke(ctx, method, &msg, &resp)
	}
	const (
		tracesExport = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
		logsExport   = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
	)
	empty := func(n int) []byte { return bytes.Repeat([]byte{2<<3 | 2, 0}, n) }
	for _, c := range []struct {
		name, method string
		msg          []byte
		want         codes.Code
	}{
		{"2,000 empty spans", tracesExport, protoField(1, protoField(2, empty(2000))), codes.ResourceExhausted},
		{"2,000 empty spans, deprecated scope", tracesExport, protoField(1, protoField(1000, empty(2000))), codes.ResourceExhausted},
		{"100 spans", tracesExport, protoField(1, protoField(2, empty(100))), codes.OK},
		{"2,000 empty records", logsExport, protoField(1, protoField(2, empty(2000))), codes.ResourceExhausted},
		{"100 records", logsExport, protoField(1, protoField(2, empty(100))), codes.OK},
	} {
		if err := call(c.method, c.msg); status.Code(err) != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if ts.spans.Load() != 100 || ls.records.Load() != 100 {
		t.Errorf("the services got %d spans, %d records; want 100, 100", ts.spans.Load(), ls.records.Load())
	}
	if got := telemetrytest.Sum(tel, "otelcol_decode_budget_refused", "reason", reasonElements); got != 3 {
		t.Errorf("refused for elements: %d, want 3", got)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package decodebudgetextension

import (
	"context"
	"testing"

	"reflect"
	"unsafe"

	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"

	"github.com/otelctx/otelctx/extension/decodebudgetextension/internal/metadata"
)

// BenchmarkUnmarshal: the server's decoding of a profiler's 5 s report of
// 64 CPUs (6,400 samples), by pdata's proto codec alone and behind the
// budget (the walk, the budget, the delegate): paired, same message.
func BenchmarkUnmarshal(b *testing.B) {
	raw := profilerMessage(b, 64)
	f := NewFactory()
	ext, err := f.Create(context.Background(), extensiontest.NewNopSettings(metadata.Type), f.CreateDefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ext.Shutdown(context.Background()) }()
	e := ext.(*decodeBudget)
	budgeted := &codec{delegate: encoding.GetCodecV2("proto"), budget: e.budget,
		maxElements: e.cfg.MaxElements, telemetry: e.telemetry, logger: e.logger}
	for _, bc := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"codec=proto", encoding.GetCodecV2("proto")}, {"codec=decode_budget", budgeted}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				req := pprofileotlp.NewExportRequest()
				if err := bc.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, profilesRequestOf(req)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// profilesRequestOf is the pdata-internal request behind req: what the
// profiles gRPC service hands the codec (TestProfilesServer goes through
// the service itself), reached with reflect since it is unexported.
func profilesRequestOf(req pprofileotlp.ExportRequest) any {
	f := reflect.ValueOf(&req).Elem().Field(0)
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface()
}

// BenchmarkCountElements: the walk alone, on the same message: what the
// codec adds to pdata's decoding apart from the budget's lock.
func BenchmarkCountElements(b *testing.B) {
	raw := profilerMessage(b, 64)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := countElements(raw, DefaultMaxElements); err != nil {
			b.Fatal(err)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package processctx_test

import (
	"strconv"
	"strings"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/otelctx/otelctx/internal/format/processctx"
)

// The encoders below build payloads with the official OTLP Go types; only the
// ProcessContext wrapper (not served by the module proxy) is written by hand:
//
//	message ProcessContext {
//	  opentelemetry.proto.resource.v1.Resource resource = 1;
//	  repeated opentelemetry.proto.common.v1.KeyValue attributes = 2;
//	}

var marshalOpts = proto.MarshalOptions{Deterministic: true}

func mustMarshal(m proto.Message) []byte {
	b, err := marshalOpts.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// encodeContext wraps a Resource and extra attributes in a ProcessContext.
func encodeContext(res *resourcepb.Resource, attrs ...*commonpb.KeyValue) []byte {
	var b []byte
	if res != nil {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, mustMarshal(res))
	}
	for _, kv := range attrs {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, mustMarshal(kv))
	}
	return b
}

func res(attrs ...*commonpb.KeyValue) *resourcepb.Resource {
	return &resourcepb.Resource{Attributes: attrs}
}

func kv(k string, v *commonpb.AnyValue) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: v}
}

func sv(s string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
}
func iv(i int64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: i}}
}
func bv(b bool) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: b}}
}
func dv(f float64) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: f}}
}
func bytesv(b []byte) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: b}}
}
func arrv(vs ...*commonpb.AnyValue) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
}
func kvlistv(kvs ...*commonpb.KeyValue) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: kvs}}}
}

// strArr is an array value of strings, e.g. a thread-context key map.
func strArr(ss ...string) *commonpb.AnyValue {
	vs := make([]*commonpb.AnyValue, len(ss))
	for i, s := range ss {
		vs[i] = sv(s)
	}
	return arrv(vs...)
}

// Expected decoded values, in processctx's model.
func pStr(s string) processctx.Value { return processctx.Value{Kind: processctx.KindStr, Str: s} }
func pInt(i int64) processctx.Value  { return processctx.Value{Kind: processctx.KindInt, Int: i} }
func pBool(b bool) processctx.Value  { return processctx.Value{Kind: processctx.KindBool, Bool: b} }
func pDbl(f float64) processctx.Value {
	return processctx.Value{Kind: processctx.KindDouble, Double: f}
}
func pBytes(b []byte) processctx.Value { return processctx.Value{Kind: processctx.KindBytes, Bytes: b} }
func pArr(vs ...processctx.Value) processctx.Value {
	if vs == nil {
		vs = []processctx.Value{}
	}
	return processctx.Value{Kind: processctx.KindArray, Array: vs}
}
func pKVList(as ...processctx.Attribute) processctx.Value {
	if as == nil {
		as = []processctx.Attribute{}
	}
	return processctx.Value{Kind: processctx.KindKVList, KVList: as}
}
func pAttr(k string, v processctx.Value) processctx.Attribute {
	return processctx.Attribute{Key: k, Value: v}
}

// realisticResource is what an SDK publishes: service identity, host and
// telemetry.sdk attributes.
func realisticResource() *resourcepb.Resource {
	return res(
		kv("service.name", sv("checkout")),
		kv("service.namespace", sv("shop")),
		kv("service.instance.id", sv("6f1c1e4e-1c53-4a0e-9f57-2d3b7a0d8a11")),
		kv("service.version", sv("1.24.3")),
		kv("deployment.environment.name", sv("production")),
		kv("host.name", sv("node-17.eu-west-1.internal")),
		kv("telemetry.sdk.name", sv("opentelemetry")),
		kv("telemetry.sdk.language", sv("go")),
		kv("telemetry.sdk.version", sv("1.38.0")),
		kv("process.pid", iv(4242)),
	)
}

// realisticPayload is a complete ProcessContext with thread-context
// reference data.
func realisticPayload() []byte {
	return encodeContext(realisticResource(),
		kv("process.runtime.name", sv("go")),
		kv(processctx.KeySchemaVersion, sv("tlsdesc_v1_dev")),
		kv(processctx.KeyAttributeKeyMap, strArr("http.route", "http.request.method", "user.id")),
	)
}

// keyMapNames returns n distinct attribute names.
func keyMapNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "k" + strings.Repeat("x", i%7) + strconv.Itoa(i)
	}
	return out
}

// SPDX-License-Identifier: Apache-2.0

package processctx_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/otelctx/otelctx/internal/format/processctx"
)

func decodeOK(t *testing.T, payload []byte, lim processctx.Limits) (processctx.Context, processctx.DecodeStats) {
	t.Helper()
	c, ds, err := processctx.Decode(payload, lim)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return c, ds
}

func assertEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %#v\nwant %#v", what, got, want)
	}
}

// allKindsPayload has every AnyValue kind, nesting, entity refs and
// thread-context reference data.
func allKindsPayload() []byte {
	return encodeContext(&resourcepb.Resource{
		Attributes: []*commonpb.KeyValue{
			kv("str", sv("checkout")),
			kv("str.empty", sv("")),
			kv("bool.true", bv(true)),
			kv("bool.false", bv(false)),
			kv("int", iv(-42)),
			kv("int.zero", iv(0)),
			kv("int.max", iv(math.MaxInt64)),
			kv("double", dv(3.25)),
			kv("double.neg", dv(-0.5)),
			kv("bytes", bytesv([]byte{0, 1, 2, 0xff})),
			kv("array", arrv(sv("x"), iv(1), arrv(bv(true), arrv()), kvlistv(kv("k", dv(1.5))))),
			kv("array.empty", arrv()),
			kv("kvlist", kvlistv(
				kv("inner", kvlistv(kv("deep", strArr("a", "b")))),
				kv("nil", nil),
			)),
			kv("kvlist.empty", kvlistv()),
			kv("anyvalue.unset", &commonpb.AnyValue{}),
			kv("value.absent", nil),
			kv("utf8.ключ", sv("значение ✓")),
		},
		DroppedAttributesCount: 7,
		EntityRefs: []*commonpb.EntityRef{
			{
				SchemaUrl:       "https://opentelemetry.io/schemas/1.26.0",
				Type:            "service",
				IdKeys:          []string{"service.name", "service.instance.id"},
				DescriptionKeys: []string{"service.version"},
			},
			{Type: "host", IdKeys: []string{"host.name"}},
		},
	},
		kv("deployment.environment.name", sv("staging")),
		kv(processctx.KeySchemaVersion, sv("tlsdesc_v1_dev")),
		kv(processctx.KeyAttributeKeyMap, strArr("http.route", "http.request.method")),
		kv("threadlocal.future_key", sv("coordination data, not telemetry")),
		kv("extra.int", iv(5)),
	)
}

func TestDecodeAllKinds(t *testing.T) {
	payload := allKindsPayload()
	c, ds := decodeOK(t, payload, processctx.DefaultLimits())
	want := processctx.Context{
		Resource: processctx.Resource{
			Attributes: []processctx.Attribute{
				pAttr("str", pStr("checkout")),
				pAttr("str.empty", pStr("")),
				pAttr("bool.true", pBool(true)),
				pAttr("bool.false", pBool(false)),
				pAttr("int", pInt(-42)),
				pAttr("int.zero", pInt(0)),
				pAttr("int.max", pInt(math.MaxInt64)),
				pAttr("double", pDbl(3.25)),
				pAttr("double.neg", pDbl(-0.5)),
				pAttr("bytes", pBytes([]byte{0, 1, 2, 0xff})),
				pAttr("array", pArr(pStr("x"), pInt(1), pArr(pBool(true), pArr()), pKVList(pAttr("k", pDbl(1.5))))),
				pAttr("array.empty", pArr()),
				pAttr("kvlist", pKVList(
					pAttr("inner", pKVList(pAttr("deep", pArr(pStr("a"), pStr("b"))))),
					pAttr("nil", processctx.Value{}),
				)),
				pAttr("kvlist.empty", pKVList()),
				pAttr("anyvalue.unset", processctx.Value{}),
				pAttr("value.absent", processctx.Value{}),
				pAttr("utf8.ключ", pStr("значение ✓")),
			},
			DroppedAttributesCount: 7,
			EntityRefs: []processctx.EntityRef{
				{
					SchemaURL:       "https://opentelemetry.io/schemas/1.26.0",
					Type:            "service",
					IDKeys:          []string{"service.name", "service.instance.id"},
					DescriptionKeys: []string{"service.version"},
				},
				{Type: "host", IDKeys: []string{"host.name"}},
			},
		},
		Attributes: []processctx.Attribute{
			pAttr("deployment.environment.name", pStr("staging")),
			pAttr("extra.int", pInt(5)),
		},
		ThreadLocal: processctx.ThreadLocal{
			SchemaVersion:   "tlsdesc_v1_dev",
			AttributeKeyMap: []string{"http.route", "http.request.method"},
		},
	}
	assertEqual(t, "context", c, want)
	assertEqual(t, "stats", ds, processctx.DecodeStats{DecodedSize: ds.DecodedSize})
	if ds.Exceeded() {
		t.Fatal("Exceeded() without any limit hit")
	}
	// The kinds are told apart, and render as documented.
	for _, a := range c.Resource.Attributes {
		if a.Key == "str" && (a.Value.Kind.String() != "string" || a.Value.AsString() != "checkout") {
			t.Fatalf("str: %v %q", a.Value.Kind, a.Value.AsString())
		}
		if a.Key == "int" && a.Value.AsString() != "" {
			t.Fatalf("int renders as %q; only strings render", a.Value.AsString())
		}
	}
	raw := processctx.AttributesAsRaw(c.Resource.Attributes)
	if got := fmt.Sprint(raw["array"]); got != "[x 1 [true []] map[k:1.5]]" {
		t.Fatalf("AsRaw(array) = %s", got)
	}
}

func TestDecodeThreadLocalSeparated(t *testing.T) {
	payload := encodeContext(realisticResource(),
		kv(processctx.KeySchemaVersion, sv("tls_v1")),
		kv("extra", sv("kept")),
		kv(processctx.KeyAttributeKeyMap, arrv(sv("a"), iv(7), sv("c"))),
	)
	c, _ := decodeOK(t, payload, processctx.DefaultLimits())
	if c.ThreadLocal.SchemaVersion != "tls_v1" {
		t.Fatalf("SchemaVersion = %q", c.ThreadLocal.SchemaVersion)
	}
	// A non-string entry keeps its index (empty name): later indexes keep meaning.
	assertEqual(t, "key map", c.ThreadLocal.AttributeKeyMap, []string{"a", "", "c"})
	assertEqual(t, "attributes", c.Attributes, []processctx.Attribute{pAttr("extra", pStr("kept"))})
	for _, a := range append(c.Attributes, c.Resource.Attributes...) {
		if strings.HasPrefix(a.Key, processctx.ThreadLocalPrefix) {
			t.Fatalf("threadlocal key %q exposed as an attribute", a.Key)
		}
	}
	// go_pprof_labels_v1 has no key map.
	c, _ = decodeOK(t, encodeContext(nil, kv(processctx.KeySchemaVersion, sv("go_pprof_labels_v1"))), processctx.DefaultLimits())
	if c.ThreadLocal.SchemaVersion != "go_pprof_labels_v1" || c.ThreadLocal.AttributeKeyMap != nil || len(c.Attributes) != 0 {
		t.Fatalf("pprof schema: %+v", c)
	}
	// A key map that is not an array is no key map.
	c, _ = decodeOK(t, encodeContext(nil, kv(processctx.KeyAttributeKeyMap, sv("a,b"))), processctx.DefaultLimits())
	if c.ThreadLocal.AttributeKeyMap != nil {
		t.Fatalf("string key map decoded as %q", c.ThreadLocal.AttributeKeyMap)
	}
}

func TestDecodeDuplicateKeysLastWins(t *testing.T) {
	payload := encodeContext(res(
		kv("a", sv("first")),
		kv("b", iv(2)),
		kv("a", sv("second")),
		kv("nested", kvlistv(kv("x", iv(1)), kv("x", iv(2)))),
	),
		kv(processctx.KeySchemaVersion, sv("tlsdesc_v1_dev")),
		kv("e", sv("1")),
		kv(processctx.KeySchemaVersion, sv("tls_v1")),
		kv("e", sv("2")),
	)
	c, ds := decodeOK(t, payload, processctx.DefaultLimits())
	assertEqual(t, "resource", c.Resource.Attributes, []processctx.Attribute{
		pAttr("a", pStr("second")),
		pAttr("b", pInt(2)),
		pAttr("nested", pKVList(pAttr("x", pInt(2)))),
	})
	assertEqual(t, "attributes", c.Attributes, []processctx.Attribute{pAttr("e", pStr("2"))})
	if c.ThreadLocal.SchemaVersion != "tls_v1" {
		t.Fatalf("SchemaVersion = %q, want the last one", c.ThreadLocal.SchemaVersion)
	}
	if ds.DuplicateKeys != 4 {
		t.Fatalf("DuplicateKeys = %d, want 4", ds.DuplicateKeys)
	}
	if ds.Exceeded() {
		t.Fatal("duplicates are not a limit")
	}
}

// A message field that occurs twice merges, as protobuf requires.
func TestDecodeRepeatedResourceMerges(t *testing.T) {
	payload := append(encodeContext(res(kv("a", sv("1")))), encodeContext(&resourcepb.Resource{
		Attributes:             []*commonpb.KeyValue{kv("b", sv("2"))},
		DroppedAttributesCount: 3,
	})...)
	c, _ := decodeOK(t, payload, processctx.DefaultLimits())
	assertEqual(t, "resource", c.Resource.Attributes, []processctx.Attribute{pAttr("a", pStr("1")), pAttr("b", pStr("2"))})
	if c.Resource.DroppedAttributesCount != 3 {
		t.Fatalf("DroppedAttributesCount = %d", c.Resource.DroppedAttributesCount)
	}
}

// Fields this reader does not know are skipped at every level.
func TestDecodeSkipsUnknownFields(t *testing.T) {
	unknown := func(b []byte) []byte {
		b = protowire.AppendTag(b, 99, protowire.VarintType)
		b = protowire.AppendVarint(b, 1<<40)
		b = protowire.AppendTag(b, 100, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, 7)
		b = protowire.AppendTag(b, 101, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, 7)
		b = protowire.AppendTag(b, 102, protowire.BytesType)
		b = protowire.AppendBytes(b, []byte("??"))
		b = protowire.AppendTag(b, 103, protowire.StartGroupType)
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
		b = protowire.AppendTag(b, 103, protowire.EndGroupType)
		return b
	}
	field := func(b []byte, num protowire.Number, msg []byte) []byte {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendBytes(b, msg)
	}
	// AnyValue{string_value: "v", string_value_strindex: 3, unknown...}
	anyv := field(nil, 1, []byte("v"))
	anyv = protowire.AppendTag(anyv, 8, protowire.VarintType)
	anyv = protowire.AppendVarint(anyv, 3)
	anyv = unknown(anyv)
	// KeyValue{key: "k", value: anyv, key_strindex: 5, unknown...}
	kvb := field(nil, 1, []byte("k"))
	kvb = field(kvb, 2, anyv)
	kvb = protowire.AppendTag(kvb, 3, protowire.VarintType)
	kvb = protowire.AppendVarint(kvb, 5)
	kvb = unknown(kvb)
	ref := unknown(field(field(nil, 2, []byte("service")), 3, []byte("k")))
	resb := unknown(field(field(nil, 1, kvb), 3, ref))
	payload := unknown(field(field(unknown(nil), 1, resb), 2, kvb))

	c, _ := decodeOK(t, payload, processctx.DefaultLimits())
	assertEqual(t, "resource", c.Resource.Attributes, []processctx.Attribute{pAttr("k", pStr("v"))})
	assertEqual(t, "entity refs", c.Resource.EntityRefs, []processctx.EntityRef{{Type: "service", IDKeys: []string{"k"}}})
	assertEqual(t, "attributes", c.Attributes, []processctx.Attribute{pAttr("k", pStr("v"))})

	if c, _ := decodeOK(t, nil, processctx.DefaultLimits()); !reflect.DeepEqual(c, processctx.Context{}) {
		t.Fatalf("empty payload: %+v", c)
	}
}

func attrsN(prefix string, n int) []*commonpb.KeyValue {
	out := make([]*commonpb.KeyValue, n)
	for i := range out {
		out[i] = kv(fmt.Sprintf("%s%d", prefix, i), iv(int64(i)))
	}
	return out
}

func pAttrsN(prefix string, n int) []processctx.Attribute {
	out := make([]processctx.Attribute, n)
	for i := range out {
		out[i] = pAttr(fmt.Sprintf("%s%d", prefix, i), pInt(int64(i)))
	}
	return out
}

func smallLimits() processctx.Limits {
	return processctx.Limits{MaxPayloadSize: processctx.DefaultMaxPayloadSize, MaxAttributes: 3, MaxValueLength: 64, MaxDepth: 8}
}

func TestDecodeMaxAttributes(t *testing.T) {
	lim := smallLimits()
	t.Run("resource", func(t *testing.T) {
		r := &resourcepb.Resource{Attributes: attrsN("r", 5), DroppedAttributesCount: 2}
		c, ds := decodeOK(t, encodeContext(r), lim)
		assertEqual(t, "attributes", c.Resource.Attributes, pAttrsN("r", 3))
		// The publisher's own count plus what this reader dropped.
		if c.Resource.DroppedAttributesCount != 4 {
			t.Fatalf("DroppedAttributesCount = %d, want 2+2", c.Resource.DroppedAttributesCount)
		}
		if ds.DroppedAttributes != 2 || !ds.Exceeded() {
			t.Fatalf("stats %+v", ds)
		}
	})
	t.Run("resource duplicate of a kept key at the limit", func(t *testing.T) {
		r := res(append(attrsN("r", 3), kv("r1", sv("replaced")))...)
		c, ds := decodeOK(t, encodeContext(r), lim)
		if v, _ := processctx.Lookup(c.Resource.Attributes, "r1"); v.Str != "replaced" || ds.DroppedAttributes != 0 {
			t.Fatalf("r1 = %+v, stats %+v: a duplicate replaces, it is not dropped", v, ds)
		}
	})
	t.Run("extra attributes", func(t *testing.T) {
		c, ds := decodeOK(t, encodeContext(nil, attrsN("x", 5)...), lim)
		assertEqual(t, "attributes", c.Attributes, pAttrsN("x", 3))
		if ds.DroppedAttributes != 2 {
			t.Fatalf("stats %+v", ds)
		}
	})
	t.Run("array and kvlist", func(t *testing.T) {
		c, ds := decodeOK(t, encodeContext(res(
			kv("arr", strArr("a", "b", "c", "d", "e")),
			kv("kvl", kvlistv(attrsN("k", 5)...)),
		)), lim)
		assertEqual(t, "attributes", c.Resource.Attributes, []processctx.Attribute{
			pAttr("arr", pArr(pStr("a"), pStr("b"), pStr("c"))),
			pAttr("kvl", pKVList(pAttrsN("k", 3)...)),
		})
		if ds.DroppedAttributes != 4 {
			t.Fatalf("stats %+v", ds)
		}
		// Entries dropped inside a value are not resource attributes dropped.
		if c.Resource.DroppedAttributesCount != 0 {
			t.Fatalf("DroppedAttributesCount = %d", c.Resource.DroppedAttributesCount)
		}
	})
	t.Run("entity refs", func(t *testing.T) {
		r := &resourcepb.Resource{}
		for i := 0; i < 5; i++ {
			r.EntityRefs = append(r.EntityRefs, &commonpb.EntityRef{Type: fmt.Sprint("t", i),
				IdKeys: []string{"a", "b", "c", "d"}, DescriptionKeys: []string{"e", "f", "g", "h", "i"}})
		}
		c, ds := decodeOK(t, encodeContext(r), lim)
		if len(c.Resource.EntityRefs) != 3 {
			t.Fatalf("%d entity refs kept", len(c.Resource.EntityRefs))
		}
		for _, e := range c.Resource.EntityRefs {
			if len(e.IDKeys) != 3 || len(e.DescriptionKeys) != 3 {
				t.Fatalf("entity ref %+v exceeds the limit", e)
			}
		}
		if ds.DroppedAttributes != 2+3*(1+2) {
			t.Fatalf("DroppedAttributes = %d", ds.DroppedAttributes)
		}
	})
	t.Run("key map up to 256", func(t *testing.T) {
		names := keyMapNames(300)
		c, ds := decodeOK(t, encodeContext(nil,
			kv(processctx.KeyAttributeKeyMap, strArr(names...)),
			kv(processctx.KeySchemaVersion, sv("tls_v1")),
		), lim)
		assertEqual(t, "key map", c.ThreadLocal.AttributeKeyMap, names[:processctx.MaxAttributeKeyMapEntries])
		if ds.DroppedAttributes != 300-256 {
			t.Fatalf("DroppedAttributes = %d", ds.DroppedAttributes)
		}
		if c.ThreadLocal.SchemaVersion != "tls_v1" {
			t.Fatal("schema version lost")
		}
	})
	t.Run("key map name only special in extra attributes", func(t *testing.T) {
		c, _ := decodeOK(t, encodeContext(res(kv(processctx.KeyAttributeKeyMap, strArr(keyMapNames(10)...)))), lim)
		v, _ := processctx.Lookup(c.Resource.Attributes, processctx.KeyAttributeKeyMap)
		if len(v.Array) != 3 {
			t.Fatalf("resource attribute named like the key map kept %d entries", len(v.Array))
		}
	})
	t.Run("key map limit follows a larger MaxAttributes", func(t *testing.T) {
		big := lim
		big.MaxAttributes = 1000
		names := keyMapNames(300)
		c, _ := decodeOK(t, encodeContext(nil, kv(processctx.KeyAttributeKeyMap, strArr(names...))), big)
		if len(c.ThreadLocal.AttributeKeyMap) != 300 {
			t.Fatalf("%d key map entries", len(c.ThreadLocal.AttributeKeyMap))
		}
	})
}

func TestDecodeDroppedAttributesCount(t *testing.T) {
	lim := smallLimits()
	// A scalar field seen twice: the last value wins, as in protobuf.
	twice := protowire.AppendTag(nil, 2, protowire.VarintType)
	twice = protowire.AppendVarint(twice, 10)
	twice = protowire.AppendTag(twice, 2, protowire.VarintType)
	twice = protowire.AppendVarint(twice, 4)
	payload := protowire.AppendTag(nil, 1, protowire.BytesType)
	payload = protowire.AppendBytes(payload, twice)
	c, _ := decodeOK(t, payload, lim)
	if c.Resource.DroppedAttributesCount != 4 {
		t.Fatalf("DroppedAttributesCount = %d, want the last value 4", c.Resource.DroppedAttributesCount)
	}
	// The sum with what the reader dropped saturates instead of wrapping.
	r := &resourcepb.Resource{Attributes: attrsN("r", 5), DroppedAttributesCount: math.MaxUint32 - 1}
	c, _ = decodeOK(t, encodeContext(r), lim)
	if c.Resource.DroppedAttributesCount != math.MaxUint32 {
		t.Fatalf("DroppedAttributesCount = %d, want saturation at MaxUint32", c.Resource.DroppedAttributesCount)
	}
	// Order does not matter: drops before the field still count.
	c, _ = decodeOK(t, append(encodeContext(res(attrsN("r", 5)...)), encodeContext(&resourcepb.Resource{DroppedAttributesCount: 1})...), lim)
	if c.Resource.DroppedAttributesCount != 3 {
		t.Fatalf("DroppedAttributesCount = %d, want 1+2", c.Resource.DroppedAttributesCount)
	}
}

func TestDecodeMaxValueLength(t *testing.T) {
	lim := smallLimits()
	lim.MaxValueLength = 10
	for _, tc := range []struct {
		in, want string
	}{
		{"0123456789", "0123456789"},                // exactly the limit: kept
		{"0123456789AB", "0123456789"},              // ASCII: cut at the limit
		{"aaaaaaaaaé", "aaaaaaaaa"},                 // é (2 bytes) at 9..10
		{"aaaaaaaa€x", "aaaaaaaa"},                  // € (3 bytes) at 8..10
		{"aaaaaaa😀", "aaaaaaa"},                     // 😀 (4 bytes) at 7..10
		{"aaaaaa😀x", "aaaaaa😀"},                     // ends exactly at a boundary
		{"ééééééé", "ééééé"},                        // 14 bytes, cut at 10
		{strings.Repeat("€", 100), "€€€"},           // 9 bytes kept
		{strings.Repeat("x", 100000), "xxxxxxxxxx"}, // long
	} {
		c, ds := decodeOK(t, encodeContext(res(kv("k", sv(tc.in))), kv("e", sv(tc.in)), kv(processctx.KeySchemaVersion, sv(tc.in))), lim)
		for _, got := range []string{c.Resource.Attributes[0].Value.Str, c.Attributes[0].Value.Str, c.ThreadLocal.SchemaVersion} {
			if got != tc.want {
				t.Errorf("%s truncated to %q, want %q", short(tc.in), got, tc.want)
			}
			if !utf8.ValidString(got) || len(got) > lim.MaxValueLength || !strings.HasPrefix(tc.in, got) {
				t.Errorf("%s truncated to invalid %q", short(tc.in), got)
			}
		}
		wantTrunc := 0
		if len(tc.in) > lim.MaxValueLength {
			wantTrunc = 3
		}
		if ds.TruncatedValues != wantTrunc || ds.Exceeded() != (wantTrunc > 0) {
			t.Errorf("%s: stats %+v", short(tc.in), ds)
		}
	}

	// Bytes are cut at the limit exactly; keys, array entries and entity
	// refs are bounded too.
	long := "0123456789abcdef"
	r := &resourcepb.Resource{
		Attributes: []*commonpb.KeyValue{
			kv("bytes", bytesv([]byte("\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac"))),
			kv(long, strArr(long)),
		},
		EntityRefs: []*commonpb.EntityRef{{SchemaUrl: long, Type: long, IdKeys: []string{long}, DescriptionKeys: []string{long}}},
	}
	c, ds := decodeOK(t, encodeContext(r, kv(processctx.KeyAttributeKeyMap, strArr(long))), lim)
	assertEqual(t, "resource", c.Resource.Attributes, []processctx.Attribute{
		pAttr("bytes", pBytes([]byte("\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2"))),
		pAttr(long[:10], pArr(pStr(long[:10]))),
	})
	assertEqual(t, "entity refs", c.Resource.EntityRefs, []processctx.EntityRef{{
		SchemaURL: long[:10], Type: long[:10], IDKeys: []string{long[:10]}, DescriptionKeys: []string{long[:10]},
	}})
	assertEqual(t, "key map", c.ThreadLocal.AttributeKeyMap, []string{long[:10]})
	if ds.TruncatedValues != 8 {
		t.Fatalf("TruncatedValues = %d, want 8", ds.TruncatedValues)
	}
}

// A MaxValueLength shorter than the threadlocal.* key names must not hide
// the thread-context reference data, nor leak it as a (truncated) attribute.
func TestDecodeThreadLocalKeysSurviveShortValueLimit(t *testing.T) {
	for _, n := range []int{1, 5, 10, 12, 20, 28} {
		lim := smallLimits()
		lim.MaxValueLength = n
		c, _ := decodeOK(t, encodeContext(nil,
			kv(processctx.KeySchemaVersion, sv("tls_v1")),
			kv(processctx.KeyAttributeKeyMap, strArr("a", "b")),
			kv("threadlocal.future_key", sv("x")),
		), lim)
		want := processctx.ThreadLocal{SchemaVersion: "tls_v1"[:min(n, 6)], AttributeKeyMap: []string{"a", "b"}}
		assertEqual(t, fmt.Sprintf("MaxValueLength %d: thread local", n), c.ThreadLocal, want)
		if len(c.Attributes) != 0 {
			t.Fatalf("MaxValueLength %d: threadlocal keys leaked as attributes %+v", n, c.Attributes)
		}
	}
}

// short shortens a test string for failure messages.
func short(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%q... (%d bytes)", s[:40], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// valueDepth is 1 for a scalar, 1 + the deepest entry for a composite.
func valueDepth(v processctx.Value) int {
	d := 0
	for _, e := range v.Array {
		d = max(d, valueDepth(e))
	}
	for _, a := range v.KVList {
		d = max(d, valueDepth(a.Value))
	}
	return d + 1
}

func TestDecodeMaxDepth(t *testing.T) {
	nestArr := func(levels int) *commonpb.AnyValue {
		v := sv("leaf")
		for i := 0; i < levels; i++ {
			v = arrv(v)
		}
		return v
	}
	nestKV := func(levels int) *commonpb.AnyValue {
		v := sv("leaf")
		for i := 0; i < levels; i++ {
			v = kvlistv(kv(fmt.Sprint("l", levels-i), v))
		}
		return v
	}
	// Exact shape at MaxDepth 3: two composite levels are kept, the third
	// becomes an empty value.
	lim := smallLimits()
	lim.MaxDepth = 3
	c, ds := decodeOK(t, encodeContext(res(kv("a", nestArr(5)), kv("k", nestKV(5)))), lim)
	assertEqual(t, "resource", c.Resource.Attributes, []processctx.Attribute{
		pAttr("a", pArr(pArr(processctx.Value{}))),
		pAttr("k", pKVList(pAttr("l1", pKVList(pAttr("l2", processctx.Value{}))))),
	})
	if ds.DroppedAttributes != 2 || !ds.Exceeded() {
		t.Fatalf("stats %+v", ds)
	}
	// No decoded value is deeper than MaxDepth, and as deep as allowed.
	for maxDepth := 1; maxDepth <= 10; maxDepth++ {
		lim.MaxDepth = maxDepth
		for levels := 0; levels <= 12; levels++ {
			mixed := sv("leaf")
			for i := 0; i < levels; i++ {
				if i%2 == 0 {
					mixed = arrv(mixed, iv(1))
				} else {
					mixed = kvlistv(kv("x", mixed))
				}
			}
			c, _ := decodeOK(t, encodeContext(res(kv("v", mixed))), lim)
			got := valueDepth(c.Resource.Attributes[0].Value)
			if want := min(levels+1, maxDepth); got != want {
				t.Fatalf("MaxDepth %d, %d levels: decoded depth %d, want %d", maxDepth, levels, got, want)
			}
		}
	}
}

func TestDecodeMalformed(t *testing.T) {
	bytesField := func(num protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
	}
	varintField := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	inResource := func(b []byte) []byte { return bytesField(1, b) }
	inExtra := func(b []byte) []byte { return bytesField(2, b) }
	inValue := func(any []byte) []byte { return inExtra(append(bytesField(1, []byte("k")), bytesField(2, any)...)) }
	valid := realisticPayload()

	for name, payload := range map[string][]byte{
		"truncated tag":                      {0x80},
		"field number 0":                     {0x00, 0x00},
		"bytes length past the end":          {0x0a, 0x05, 'a'},
		"truncated valid payload":            valid[:len(valid)-1],
		"garbage 0xff (the C publisher's)":   []byte(strings.Repeat("\xff", 64)),
		"stray end group":                    {0x0c},
		"resource as varint":                 varintField(1, 1),
		"attributes as fixed32":              {0x15, 0, 0, 0, 0},
		"resource.attributes as varint":      inResource(varintField(1, 1)),
		"resource.dropped as bytes":          inResource(bytesField(2, nil)),
		"resource.entity_refs as varint":     inResource(varintField(3, 1)),
		"entity_ref.type as varint":          inResource(bytesField(3, varintField(2, 1))),
		"keyvalue.key as varint":             inExtra(varintField(1, 1)),
		"keyvalue.value as varint":           inExtra(varintField(2, 1)),
		"keyvalue truncated":                 inExtra([]byte{0x0a, 0x09, 'k'}),
		"anyvalue.string as varint":          inValue(varintField(1, 1)),
		"anyvalue.bool as bytes":             inValue(bytesField(2, nil)),
		"anyvalue.int as fixed64":            inValue(protowire.AppendFixed64(protowire.AppendTag(nil, 3, protowire.Fixed64Type), 1)),
		"anyvalue.double as varint":          inValue(varintField(4, 1)),
		"anyvalue.array as varint":           inValue(varintField(5, 1)),
		"anyvalue.kvlist as varint":          inValue(varintField(6, 1)),
		"anyvalue.bytes as varint":           inValue(varintField(7, 1)),
		"array entry as varint":              inValue(bytesField(5, varintField(1, 1))),
		"array entry malformed deep":         inValue(bytesField(5, bytesField(1, bytesField(5, bytesField(1, varintField(1, 1)))))),
		"kvlist entry as varint":             inValue(bytesField(6, varintField(1, 1))),
		"kvlist entry value malformed":       inValue(bytesField(6, bytesField(1, append(bytesField(1, []byte("x")), bytesField(2, []byte{0xff})...)))),
		"resource attribute value malformed": inResource(bytesField(1, append(bytesField(1, []byte("x")), bytesField(2, varintField(1, 1))...))),
		"varint overflow in dropped count":   inResource([]byte{0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}),
		"valid then garbage":                 append(append([]byte(nil), valid...), 0xff),
		"unterminated group":                 {0x0b, 0x08, 0x01},
	} {
		t.Run(name, func(t *testing.T) {
			c, _, err := processctx.Decode(payload, processctx.DefaultLimits())
			if !errors.Is(err, processctx.ErrMalformedPayload) {
				t.Fatalf("Decode(% x) = %v, want ErrMalformedPayload", payload, err)
			}
			if !reflect.DeepEqual(c, processctx.Context{}) {
				t.Fatalf("partial result returned with an error: %+v", c)
			}
		})
	}
}

func TestDecodeRealistic(t *testing.T) {
	c, ds := decodeOK(t, realisticPayload(), processctx.DefaultLimits())
	if len(c.Resource.Attributes) != 10 || len(c.Attributes) != 1 || len(c.ThreadLocal.AttributeKeyMap) != 3 || ds != (processctx.DecodeStats{DecodedSize: ds.DecodedSize}) {
		t.Fatalf("realistic payload: %+v %+v", c, ds)
	}
	if v, ok := processctx.Lookup(c.Resource.Attributes, "service.name"); !ok || v.Str != "checkout" {
		t.Fatalf("service.name = %+v", v)
	}
	if _, ok := processctx.Lookup(c.Resource.Attributes, "absent"); ok {
		t.Fatal("Lookup found an absent key")
	}
}

// The decoded context must not alias the payload: the scanner reuses its
// payload buffer for the next read.
func TestDecodeDoesNotAliasPayload(t *testing.T) {
	payload := allKindsPayload()
	want, _ := decodeOK(t, allKindsPayload(), processctx.DefaultLimits())
	got, _ := decodeOK(t, payload, processctx.DefaultLimits())
	for i := range payload {
		payload[i] = 0xff
	}
	assertEqual(t, "context after the payload buffer was overwritten", got, want)
}

// The thread-context reference keys survive a full extra-attribute list.
func TestThreadLocalKeysPastAttributeLimit(t *testing.T) {
	var payload []byte
	for i := 0; i < 5; i++ {
		payload = appendExtraString(payload, fmt.Sprintf("extra.%d", i), "v")
	}
	payload = appendExtraString(payload, processctx.KeySchemaVersion, "tls_v1")
	lim := processctx.DefaultLimits()
	lim.MaxAttributes = 5
	c, st, err := processctx.Decode(payload, lim)
	if err != nil {
		t.Fatal(err)
	}
	if c.ThreadLocal.SchemaVersion != "tls_v1" || len(c.Attributes) != 5 || st.DroppedAttributes != 0 {
		t.Fatalf("schema %q, %d attributes, %d dropped", c.ThreadLocal.SchemaVersion, len(c.Attributes), st.DroppedAttributes)
	}
	payload = appendExtraString(payload, "extra.5", "v")
	if c, st, _ = processctx.Decode(payload, lim); len(c.Attributes) != 5 || st.DroppedAttributes != 1 {
		t.Fatalf("a sixth extra attribute must still be dropped: %d kept, %d dropped", len(c.Attributes), st.DroppedAttributes)
	}
}

// appendExtraString appends ProcessContext.attributes{key: string value}.
func appendExtraString(b []byte, key, val string) []byte {
	var anyValue, kv []byte
	anyValue = protowire.AppendTag(anyValue, 1, protowire.BytesType) // AnyValue.string_value
	anyValue = protowire.AppendString(anyValue, val)
	kv = protowire.AppendTag(kv, 1, protowire.BytesType) // KeyValue.key
	kv = protowire.AppendString(kv, key)
	kv = protowire.AppendTag(kv, 2, protowire.BytesType) // KeyValue.value
	kv = protowire.AppendBytes(kv, anyValue)
	b = protowire.AppendTag(b, 2, protowire.BytesType) // ProcessContext.attributes
	return protowire.AppendBytes(b, kv)
}

// SPDX-License-Identifier: Apache-2.0

package processctx_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/testutil/fuzzcorpus"
)

func FuzzParseHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte, maxPayload uint32) {
		h, err := processctx.ParseHeader(b, maxPayload)
		if err != nil {
			n := 0
			for _, e := range []error{processctx.ErrInvalidContext, processctx.ErrUpdateInProgress, processctx.ErrPayloadSize} {
				if errors.Is(err, e) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("error %v matches %d reasons, want exactly one", err, n)
			}
			return
		}
		if len(b) < processctx.HeaderSize || !bytes.Equal(b[:8], []byte("OTEL_CTX")) {
			t.Fatalf("accepted % x", b)
		}
		want := processctx.Header{
			Version:       binary.NativeEndian.Uint32(b[8:]),
			PayloadSize:   binary.NativeEndian.Uint32(b[12:]),
			PublishedAtNs: binary.NativeEndian.Uint64(b[16:]),
			PayloadAddr:   binary.NativeEndian.Uint64(b[24:]),
		}
		if h != want {
			t.Fatalf("ParseHeader = %+v, want %+v", h, want)
		}
		if h.Version != processctx.Version || h.PublishedAtNs == 0 || h.PayloadSize == 0 || h.PayloadSize > maxPayload {
			t.Fatalf("accepted out-of-bounds header %+v (max %d)", h, maxPayload)
		}
	})
}

// fuzzLimits are the defaults and a tight set that fuzz inputs hit easily.
var fuzzLimits = []processctx.Limits{
	processctx.DefaultLimits(),
	{MaxPayloadSize: processctx.DefaultMaxPayloadSize, MaxAttributes: 2, MaxValueLength: 5, MaxDepth: 2},
	// A budget that small inputs reach.
	{MaxPayloadSize: processctx.DefaultMaxPayloadSize, MaxAttributes: 128, MaxValueLength: 4096, MaxDepth: 8, MaxDecodedSize: 2048},
}

func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, payload []byte) {
		for _, lim := range fuzzLimits {
			c, ds, err := processctx.Decode(payload, lim)
			if err != nil {
				if errors.Is(err, processctx.ErrMalformedPayload) == errors.Is(err, processctx.ErrBudget) {
					t.Fatalf("error %v is not exactly one of ErrMalformedPayload and ErrBudget", err)
				}
				if !reflect.DeepEqual(c, processctx.Context{}) {
					t.Fatalf("partial result with an error: %+v", c)
				}
				continue
			}
			checkLimits(t, c, lim)
			checkBudget(t, c, ds, lim)
			if ds.DroppedAttributes < 0 || ds.TruncatedValues < 0 || ds.DuplicateKeys < 0 {
				t.Fatalf("negative stats %+v", ds)
			}
			again, ds2, err := processctx.Decode(payload, lim)
			if err != nil || !reflect.DeepEqual(c, again) || ds != ds2 {
				t.Fatalf("Decode is not deterministic")
			}
		}
	})
}

// checkLimits asserts what Limits promise for any input.
func checkLimits(t *testing.T, c processctx.Context, lim processctx.Limits) {
	t.Helper()
	str := func(what, s string) {
		if len(s) > lim.MaxValueLength {
			t.Fatalf("%s: %d bytes > MaxValueLength %d", what, len(s), lim.MaxValueLength)
		}
		if !utf8.ValidString(s) {
			t.Fatalf("%s: invalid UTF-8 %q", what, s)
		}
	}
	list := func(what string, n int) {
		if n > lim.MaxAttributes {
			t.Fatalf("%s: %d entries > MaxAttributes %d", what, n, lim.MaxAttributes)
		}
	}
	var attrs func(what string, as []processctx.Attribute, depth int)
	var value func(what string, v processctx.Value, depth int)
	value = func(what string, v processctx.Value, depth int) {
		if depth > lim.MaxDepth {
			t.Fatalf("%s: value at depth %d > MaxDepth %d", what, depth, lim.MaxDepth)
		}
		str(what, v.Str)
		if len(v.Bytes) > lim.MaxValueLength {
			t.Fatalf("%s: %d bytes > MaxValueLength %d", what, len(v.Bytes), lim.MaxValueLength)
		}
		list(what, len(v.Array))
		for i, e := range v.Array {
			value(fmt.Sprintf("%s[%d]", what, i), e, depth+1)
		}
		attrs(what, v.KVList, depth+1)
	}
	attrs = func(what string, as []processctx.Attribute, depth int) {
		list(what, len(as))
		seen := map[string]bool{}
		for _, a := range as {
			str(what+" key", a.Key)
			if seen[a.Key] {
				t.Fatalf("%s: duplicate key %q", what, a.Key)
			}
			seen[a.Key] = true
			value(what+"."+a.Key, a.Value, depth)
		}
	}
	attrs("resource", c.Resource.Attributes, 1)
	attrs("attributes", c.Attributes, 1)
	for _, a := range c.Attributes {
		if strings.HasPrefix(a.Key, processctx.ThreadLocalPrefix) {
			t.Fatalf("threadlocal key %q exposed as an attribute", a.Key)
		}
	}
	list("entity refs", len(c.Resource.EntityRefs))
	for _, e := range c.Resource.EntityRefs {
		str("entity ref schema url", e.SchemaURL)
		str("entity ref type", e.Type)
		list("entity ref id keys", len(e.IDKeys))
		list("entity ref description keys", len(e.DescriptionKeys))
		for _, k := range append(append([]string(nil), e.IDKeys...), e.DescriptionKeys...) {
			str("entity ref key", k)
		}
	}
	str("schema version", c.ThreadLocal.SchemaVersion)
	if n := len(c.ThreadLocal.AttributeKeyMap); n > max(lim.MaxAttributes, processctx.MaxAttributeKeyMapEntries) {
		t.Fatalf("key map: %d entries", n)
	}
	for _, k := range c.ThreadLocal.AttributeKeyMap {
		str("key map entry", k)
	}
}

// checkBudget asserts that an accepted context costs what DecodedSize
// says, at most, and that it is within the budget.
func checkBudget(t *testing.T, c processctx.Context, ds processctx.DecodeStats, lim processctx.Limits) {
	t.Helper()
	budget := lim.MaxDecodedSize
	if budget == 0 {
		budget = processctx.DecodedSizeMultiple * int(lim.MaxPayloadSize)
	}
	if ds.DecodedSize > budget {
		t.Fatalf("accepted a context of %d bytes, over the budget of %d", ds.DecodedSize, budget)
	}
	if n := processctx.AttributesSize(c.Resource.Attributes) + processctx.AttributesSize(c.Attributes); n > ds.DecodedSize {
		t.Fatalf("attributes of %d bytes, DecodedSize %d", n, ds.DecodedSize)
	}
	if len(c.Resource.EntityRefs) > processctx.MaxEntityRefs {
		t.Fatalf("%d entity refs", len(c.Resource.EntityRefs))
	}
	types := map[string]bool{}
	for _, e := range c.Resource.EntityRefs {
		if types[e.Type] {
			t.Fatalf("entity type %q twice", e.Type)
		}
		types[e.Type] = true
	}
}

// invalidUTF8Payload has invalid UTF-8 in a key, a value, a nested key,
// an entity ref's type and two keys, and the key map: 7 strings.
func invalidUTF8Payload() []byte {
	// Written by hand: proto.Marshal refuses invalid UTF-8 in strings.
	msg := func(fields ...[]byte) []byte { return bytes.Join(fields, nil) }
	field := func(num protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
	}
	str := func(s string) []byte { return field(1, []byte(s)) } // AnyValue.string_value
	keyValue := func(k string, v []byte) []byte { return msg(field(1, []byte(k)), field(2, v)) }
	resource := msg(
		field(1, keyValue("service.name\xc3", str("ok\xff\xfe"))),
		field(1, keyValue("k", field(6, field(1, keyValue("in\xed\xa0\x80", str("v")))))),
		field(3, msg(field(2, []byte("t\xff")), field(3, []byte("service.name\xc3")), field(3, []byte("x\x80")))),
	)
	keyMap := field(5, msg(field(1, str("http.route")), field(1, str("bad\xc0\xaf"))))
	return msg(field(1, resource), field(2, keyValue(processctx.KeyAttributeKeyMap, keyMap)))
}

// nestedPayload is a resource of n attributes, each an array of outer
// arrays of inner empty AnyValues: tiny on the wire, large decoded.
func nestedPayload(n, outer, inner int, refs int) []byte {
	in := &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{}}}
	for range inner {
		in.GetArrayValue().Values = append(in.GetArrayValue().Values, &commonpb.AnyValue{})
	}
	arr := &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{}}}
	for range outer {
		arr.GetArrayValue().Values = append(arr.GetArrayValue().Values, in)
	}
	r := &resourcepb.Resource{}
	var keys []string
	for i := range n {
		k := fmt.Sprint("hostile.nested.", i)
		keys = append(keys, k)
		r.Attributes = append(r.Attributes, kv(k, arr))
	}
	for i := range refs {
		r.EntityRefs = append(r.EntityRefs, &commonpb.EntityRef{Type: fmt.Sprint("hostile.entity.", i), IdKeys: keys})
	}
	return encodeContext(r)
}

// The seed corpus under testdata/fuzz is generated from the encoders in
// these tests; TestSeedCorpus keeps it in sync (go test -run TestSeedCorpus
// -update-corpus rewrites it).

func seedCorpus() fuzzcorpus.Seeds {
	const max = uint32(processctx.DefaultMaxPayloadSize)
	deep := sv("leaf")
	for i := 0; i < 12; i++ {
		if i%2 == 0 {
			deep = arrv(deep, iv(int64(i)))
		} else {
			deep = kvlistv(kv(fmt.Sprint("level", i), deep))
		}
	}
	dups := encodeContext(res(kv("a", sv("1")), kv("a", sv("2")), kv("b", kvlistv(kv("x", iv(1)), kv("x", iv(2))))),
		kv(processctx.KeySchemaVersion, sv("tlsdesc_v1_dev")), kv(processctx.KeySchemaVersion, sv("tls_v1")))
	many := &resourcepb.Resource{DroppedAttributesCount: 4}
	for i := 0; i < 200; i++ {
		many.Attributes = append(many.Attributes, kv(fmt.Sprint("attr.", i), iv(int64(i))))
	}
	realistic := realisticPayload()
	wrongType := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1)
	unknown := protowire.AppendVarint(protowire.AppendTag(realistic[:len(realistic):len(realistic)], 77, protowire.VarintType), 5)
	return map[string]map[string][]any{
		"FuzzDecode": {
			"realistic":          {realistic},
			"all-kinds":          {allKindsPayload()},
			"key-map-300":        {encodeContext(nil, kv(processctx.KeySchemaVersion, sv("tls_v1")), kv(processctx.KeyAttributeKeyMap, strArr(keyMapNames(300)...)))},
			"deep-nesting":       {encodeContext(res(kv("deep", deep)))},
			"duplicate-keys":     {dups},
			"many-attributes":    {encodeContext(many)},
			"long-utf8-values":   {encodeContext(res(kv("v", sv(strings.Repeat("€é😀x", 50)))), kv("ключ", sv(strings.Repeat("ж", 100))))},
			"bytes-and-doubles":  {encodeContext(res(kv("b", bytesv(bytes.Repeat([]byte{0xe2, 0x82}, 40))), kv("d", dv(-1e300))))},
			"entity-refs":        {encodeContext(&resourcepb.Resource{EntityRefs: []*commonpb.EntityRef{{SchemaUrl: "https://opentelemetry.io/schemas/1.26.0", Type: "service", IdKeys: []string{"service.name", "service.instance.id"}, DescriptionKeys: []string{"service.version"}}}})},
			"unknown-field":      {unknown},
			"empty":              {[]byte{}},
			"garbage-ff":         {bytes.Repeat([]byte{0xff}, 64)},
			"truncated":          {realistic[:len(realistic)/2]},
			"wrong-wire-type":    {wrongType},
			"stray-end-group":    {[]byte{0x0c}},
			"length-past-end":    {[]byte{0x0a, 0x7f, 0x0a}},
			"budget-nested":      {nestedPayload(2, 16, 120, 0)},
			"invalid-utf8":       {invalidUTF8Payload()},
			"budget-entity-refs": {nestedPayload(1, 4, 40, 128)},
			"threadlocal-future": {encodeContext(nil, kv("threadlocal.future", sv("x")), kv("threadlocal.attribute_key_map", sv("not an array")))},
		},
		"FuzzParseHeader": {
			"valid":          {header("OTEL_CTX", 2, 300, 1700000000000000000, 0x7f12345000), max},
			"valid-inline":   {append(header("OTEL_CTX", 2, 31, 42, 0x7f12345040), make([]byte, 32)...), max},
			"in-progress":    {header("OTEL_CTX", 2, 300, 0, 0x7f12345000), max},
			"bad-signature":  {header("OTEL_CTY", 2, 300, 1, 1), max},
			"version-1":      {header("OTEL_CTX", 1, 300, 1, 1), max},
			"size-0":         {header("OTEL_CTX", 2, 0, 1, 1), max},
			"size-100000000": {header("OTEL_CTX", 2, 100000000, 1, 1), max},
			"size-at-limit":  {header("OTEL_CTX", 2, 4096, 1, 1), uint32(4096)},
			"short":          {[]byte("OTEL_CTX\x02\x00\x00\x00"), max},
		},
	}
}

// TestSeedCorpus keeps testdata/fuzz in step with seedCorpus (rewrite it
// with go test -run TestSeedCorpus -update-corpus).
func TestSeedCorpus(t *testing.T) { fuzzcorpus.Check(t, "./internal/format/processctx", seedCorpus()) }

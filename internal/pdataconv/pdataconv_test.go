// SPDX-License-Identifier: Apache-2.0

package pdataconv

import (
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/otelctx/otelctx/internal/format/processctx"
)

// TestInvalidUTF8NeverReachesPdata: keys and string values, nested ones
// too, are valid UTF-8 in pdata whatever the Attribute held (the decoder
// already replaces; an attribute built elsewhere, e.g. from an executable's
// path, may not).
func TestInvalidUTF8NeverReachesPdata(t *testing.T) {
	str := func(s string) processctx.Value { return processctx.Value{Kind: processctx.KindStr, Str: s} }
	m := pcommon.NewMap()
	PutAttributes(m, []processctx.Attribute{
		{Key: "process.executable.path", Value: str("/tmp/a\xff")},
		{Key: "k\xc3", Value: processctx.Value{Kind: processctx.KindArray, Array: []processctx.Value{str("x\x80")}}},
		{Key: "kv", Value: processctx.Value{Kind: processctx.KindKVList, KVList: []processctx.Attribute{{Key: "in\xed\xa0\x80", Value: str("ok")}}}},
		{Key: "bytes", Value: processctx.Value{Kind: processctx.KindBytes, Bytes: []byte{0xff}}},
	})
	var check func(m pcommon.Map)
	var value func(v pcommon.Value)
	value = func(v pcommon.Value) {
		switch v.Type() {
		case pcommon.ValueTypeStr:
			if !utf8.ValidString(v.Str()) {
				t.Errorf("value %q", v.Str())
			}
		case pcommon.ValueTypeSlice:
			for i := range v.Slice().Len() {
				value(v.Slice().At(i))
			}
		case pcommon.ValueTypeMap:
			check(v.Map())
		}
	}
	check = func(m pcommon.Map) {
		for k, v := range m.All() {
			if !utf8.ValidString(k) {
				t.Errorf("key %q", k)
			}
			value(v)
		}
	}
	check(m)
	if v, ok := m.Get("process.executable.path"); !ok || v.Str() != "/tmp/a\uFFFD" {
		t.Errorf("path %v", v.AsRaw())
	}
	if v, ok := m.Get("bytes"); !ok || v.Bytes().At(0) != 0xff {
		t.Error("bytes values are binary: kept as they are")
	}
}

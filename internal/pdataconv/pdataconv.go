// SPDX-License-Identifier: Apache-2.0

// Package pdataconv copies decoded process-context values into pdata.
// Every string it writes, key or value, goes through utf8safe: what another
// process published reaches pdata as valid UTF-8 whatever path it took
// (the decoder has already replaced and counted invalid bytes; values built
// from other sources, e.g. an executable's path, are replaced here).
package pdataconv

import (
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/utf8safe"
)

// PutValue sets dst to v, recursively for arrays and kvlists.
func PutValue(dst pcommon.Value, v processctx.Value) {
	switch v.Kind {
	case processctx.KindStr:
		dst.SetStr(Str(v.Str))
	case processctx.KindBool:
		dst.SetBool(v.Bool)
	case processctx.KindInt:
		dst.SetInt(v.Int)
	case processctx.KindDouble:
		dst.SetDouble(v.Double)
	case processctx.KindBytes:
		dst.SetEmptyBytes().FromRaw(v.Bytes)
	case processctx.KindArray:
		s := dst.SetEmptySlice()
		s.EnsureCapacity(len(v.Array))
		for i := range v.Array {
			PutValue(s.AppendEmpty(), v.Array[i])
		}
	case processctx.KindKVList:
		PutAttributes(dst.SetEmptyMap(), v.KVList)
	}
}

// PutAttributes adds attrs to dst; an existing key is overwritten.
func PutAttributes(dst pcommon.Map, attrs []processctx.Attribute) {
	dst.EnsureCapacity(dst.Len() + len(attrs))
	for i := range attrs {
		// PutEmpty overwrites an existing key with an empty value.
		PutValue(dst.PutEmpty(Str(attrs[i].Key)), attrs[i].Value)
	}
}

// Str is s as it may enter pdata: invalid UTF-8 replaced.
func Str(s string) string {
	s, _ = utf8safe.String(s)
	return s
}

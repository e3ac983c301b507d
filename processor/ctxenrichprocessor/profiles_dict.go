// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ctxenrichprocessor

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/pdataconv"
)

// result returns what rec adds to a sample, adding its link and
// attributes to the dictionary (the caller keeps it with the record's run,
// so it is computed once per record and message).
func (b *batch) result(rec *catalog.ThreadRecord) recResult {
	var r recResult
	tr, sp := rec.Record.TraceID, rec.Record.SpanID
	if tr != ([16]byte{}) && sp != ([8]byte{}) {
		r.link = b.linkIndex(tr, sp)
	}
	if kv := rec.SortedAttributes(); len(kv) > 0 {
		// The catalog shares one slice between records with the same
		// attributes: each distinct set is resolved once per message.
		if w, ok := b.sets[&kv[0]]; ok {
			r.attrs, r.keys = w.attrs, w.keys
			return r
		}
		// Both slices are windows of the arena; a later append that moves
		// the arena leaves them on the old (unchanged) backing array.
		n, start := len(kv), len(b.arena)
		b.arena = slices.Grow(b.arena, 2*n)[:start+2*n]
		w := b.arena[start:]
		for i, a := range kv {
			// Parsed records are valid UTF-8 already (threadctx); the
			// rule holds on every path into pdata.
			w[n+i] = b.stringIndex(pdataconv.Str(a.Key))
			w[i] = b.attrIndex(w[n+i], pdataconv.Str(a.Value))
		}
		r.attrs, r.keys = w[:n:n], w[n:2*n:2*n]
		b.sets[&kv[0]] = r
	}
	return r
}

// addAttributes appends r's attributes whose key the sample lacks (its own
// value of a key wins).
func (b *batch) addAttributes(ai pcommon.Int32Slice, r recResult) {
	n0 := ai.Len()
	var add [8]int32 // typical records have few attributes: no allocation
	extra := add[:0]
outer:
	for i, ki := range r.keys {
		for j := range n0 {
			idx := ai.At(j)
			if idx == r.attrs[i] {
				continue outer
			}
			if idx > 0 && int(idx) < len(b.keyOf) && b.keyOf[idx] == ki {
				continue outer
			}
		}
		extra = append(extra, r.attrs[i])
	}
	if len(extra) > 0 {
		ai.EnsureCapacity(n0 + len(extra))
		ai.Append(extra...)
	}
}

// stringIndex returns the string table index of s, adding it if absent.
// A message needs few distinct keys, so a linear search of the table per
// distinct key is cheaper than indexing the whole (large) table.
func (b *batch) stringIndex(s string) int32 {
	if i, ok := b.strIdx[s]; ok {
		return i
	}
	if b.strs.Len() == 0 {
		b.strs.Append("") // index 0 is the empty string
	}
	idx := int32(-1)
	for i, v := range b.strs.All() {
		if i > 0 && v == s {
			idx = int32(i)
			break
		}
	}
	if idx < 0 {
		b.strs.Append(s)
		idx = int32(b.strs.Len() - 1)
	}
	b.strIdx[s] = idx
	return idx
}

// attrIndex returns the index of the string attribute key=val, adding it
// if the table has no equal entry.
func (b *batch) attrIndex(key int32, val string) int32 {
	if !b.attrIdxBuilt {
		b.attrIdxBuilt = true
		if b.attrs.Len() == 0 {
			b.attrs.AppendEmpty() // index 0 is the empty attribute
			b.keyOf = append(b.keyOf, 0)
		}
		for i := 1; i < b.attrs.Len(); i++ {
			kv := b.attrs.At(i)
			if kv.UnitStrindex() == 0 && kv.Value().Type() == pcommon.ValueTypeStr {
				k := attrKey{kv.KeyStrindex(), kv.Value().Str()}
				if _, dup := b.attrIdx[k]; !dup {
					b.attrIdx[k] = int32(i)
				}
			}
		}
	}
	k := attrKey{key, val}
	if i, ok := b.attrIdx[k]; ok {
		return i
	}
	kv := b.attrs.AppendEmpty()
	kv.SetKeyStrindex(key)
	kv.Value().SetStr(val)
	i := int32(b.attrs.Len() - 1)
	b.attrIdx[k] = i
	b.keyOf = append(b.keyOf, key)
	return i
}

// linkIndex returns the index of the link (trace, span), adding it if the
// table has no equal entry.
func (b *batch) linkIndex(trace [16]byte, span [8]byte) int32 {
	if !b.linkIdxBuilt {
		b.linkIdxBuilt = true
		if b.links.Len() == 0 {
			b.links.AppendEmpty() // index 0 is the empty link
		}
		for i := 1; i < b.links.Len(); i++ {
			l := b.links.At(i)
			k := linkKey(l.TraceID(), l.SpanID())
			if _, dup := b.linkIdx[k]; !dup {
				b.linkIdx[k] = int32(i)
			}
		}
	}
	k := linkKey(trace, span)
	if i, ok := b.linkIdx[k]; ok {
		return i
	}
	l := b.links.AppendEmpty()
	l.SetTraceID(trace)
	l.SetSpanID(span)
	i := int32(b.links.Len() - 1)
	b.linkIdx[k] = i
	return i
}

func linkKey(trace [16]byte, span [8]byte) (k [24]byte) {
	copy(k[:16], trace[:])
	copy(k[16:], span[:])
	return k
}

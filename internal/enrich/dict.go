// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

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
		b.indexAttributes()
		// Both slices are windows of the arena; a later append that moves
		// the arena leaves them on the old (unchanged) backing array.
		n, start := len(kv), len(b.arena)
		b.arena = slices.Grow(b.arena, 2*n)[:start+2*n]
		w := b.arena[start:]
		for i, a := range kv {
			// Parsed records are valid UTF-8 already (threadctx); the
			// rule holds on every path into pdata.
			w[n+i] = b.keyIndex(pdataconv.Str(a.Key))
			w[i] = b.attrIndex(w[n+i], pdataconv.Str(a.Value))
		}
		r.attrs, r.keys = w[:n:n], w[n:2*n:2*n]
		b.sets[&kv[0]] = r
	}
	return r
}

// smallMerge: up to this many (record keys × sample attributes) pairs, a
// sample's merge compares them directly (no marking pass to pay).
const smallMerge = 64

// addAttributes appends r's attributes whose key the sample lacks (its own
// value of a key wins). Its cost is linear in the sample's attributes plus
// the record's: past smallMerge pairs, the sample's keys are marked once.
func (b *batch) addAttributes(ai pcommon.Int32Slice, r recResult) {
	n0 := ai.Len()
	extra := b.extra[:0]
	if n0*len(r.keys) <= smallMerge {
	outer:
		for i, ki := range r.keys {
			for j := range n0 {
				if idx := ai.At(j); idx > 0 && int(idx) < len(b.keyOf) && b.keyOf[idx] == ki {
					continue outer
				}
			}
			extra = append(extra, r.attrs[i])
		}
	} else {
		if n := b.strs.Len(); len(b.mark) < n {
			b.mark = append(b.mark, make([]uint32, n-len(b.mark))...)
		}
		if b.markGen++; b.markGen == 0 { // wrapped: old stamps could match
			clear(b.mark)
			b.markGen = 1
		}
		for _, idx := range ai.All() {
			if idx > 0 && int(idx) < len(b.keyOf) {
				if k := b.keyOf[idx]; k > 0 && int(k) < len(b.mark) {
					b.mark[k] = b.markGen
				}
			}
		}
		for i, ki := range r.keys {
			if b.mark[ki] != b.markGen {
				extra = append(extra, r.attrs[i])
			}
		}
	}
	if len(extra) > 0 {
		ai.EnsureCapacity(n0 + len(extra))
		ai.Append(extra...)
	}
	b.extra = extra[:0]
}

// indexAttributes indexes the message's attribute table once, on the first
// record attribute set to resolve: its string attributes by (key, value),
// and its keys by their text. Entries whose keys are equal strings at
// different indices get the first one's index in keyOf, so that a sample's
// own value of a key is recognised whichever copy it names.
func (b *batch) indexAttributes() {
	if b.attrIdxBuilt {
		return
	}
	b.attrIdxBuilt = true
	if b.attrs.Len() == 0 {
		b.attrs.AppendEmpty() // index 0 is the empty attribute
		b.keyOf = append(b.keyOf, 0)
	}
	nStrs := int32(b.strs.Len())
	prevRaw, prevKey := int32(-1), int32(-1) // entries of one key are often adjacent
	for i := 1; i < b.attrs.Len(); i++ {
		k := b.keyOf[i]
		if k > 0 && k < nStrs {
			if k == prevRaw {
				k = prevKey
			} else {
				prevRaw = k
				s := b.strs.At(int(k))
				if first, ok := b.keyIdx[s]; ok {
					k = first
				} else {
					b.keyIdx[s] = k
				}
				prevKey = k
			}
			b.keyOf[i] = k
		}
		kv := b.attrs.At(i)
		if kv.UnitStrindex() == 0 && kv.Value().Type() == pcommon.ValueTypeStr {
			ak := attrKey{k, kv.Value().Str()}
			if _, dup := b.attrIdx[ak]; !dup {
				b.attrIdx[ak] = int32(i)
			}
		}
	}
}

// keyIndex returns the string table index of the attribute key s: the one
// the message's attributes already use for it, else a new entry. Only
// strings used as keys matter to the join (a sample's own value of a key
// wins), so the rest of the table, which may hold millions of strings, is
// never searched; an equal string used otherwise costs one more entry.
func (b *batch) keyIndex(s string) int32 {
	if i, ok := b.keyIdx[s]; ok {
		return i
	}
	if b.strs.Len() == 0 {
		b.strs.Append("") // index 0 is the empty string
	}
	b.strs.Append(s)
	i := int32(b.strs.Len() - 1)
	b.keyIdx[s] = i
	return i
}

// attrIndex returns the index of the string attribute key=val, adding it
// if the table has no equal entry (indexAttributes has run).
func (b *batch) attrIndex(key int32, val string) int32 {
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

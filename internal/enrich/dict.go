// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/pdataconv"
	"github.com/otelctx/otelctx/internal/profiledict"
)

// additions are the entries a message's join adds to its dictionary
// (links, attribute keys and attributes, each added once) and the indices
// that find the existing ones. Per message: newAdditions empties a used
// value's buffers, the rest is zero.
type additions struct {
	strs  pcommon.StringSlice
	attrs pprofile.KeyValueAndUnitSlice
	links pprofile.LinkSlice
	// keyOf gives, per attribute table index, the entry's key string
	// index, entries of equal keys sharing the first one's (built by
	// indexAttributes, with the entries added).
	keyOf []int32
	arena []int32 // backing of the recResults' slices
	// sets: a record attribute set (the catalog's shared slice, by its
	// first element) → its indices in this message (link unused).
	sets map[*catalog.Attribute]recResult
	// keyIdx: the text of each attribute key → its string index (the
	// table's keys and those this processor added).
	keyIdx  map[string]int32
	attrIdx map[attrKey]int32
	linkIdx map[[24]byte]int32
	// attrIdxBuilt / linkIdxBuilt: the maps hold the whole table (built on
	// first need, since most messages of a process without spans need none).
	attrIdxBuilt, linkIdxBuilt bool
	// mark: per string index, the stamp (markGen) of the sample whose keys
	// it holds; extra: the attributes a merge adds. addAttributes' scratch.
	mark    []uint32
	markGen uint32
	extra   []int32
	// received: the key of each attribute entry as received.
	received []int32
}

// newAdditions returns the additions of a message of dictionary d,
// reusing the buffers of used (mark keeps its stamps: markGen moves on).
func newAdditions(d *profiledict.Dict, used *additions) additions {
	return additions{
		strs: d.Strings, attrs: d.Attributes, links: d.Links, received: d.KeyOf(),
		keyOf: used.keyOf[:0], arena: used.arena[:0],
		sets: cleared(used.sets), keyIdx: cleared(used.keyIdx), attrIdx: cleared(used.attrIdx), linkIdx: cleared(used.linkIdx),
		mark: used.mark, markGen: used.markGen, extra: used.extra[:0],
	}
}

// size is the number of entries its maps and scratch hold.
func (a *additions) size() int {
	return len(a.sets) + len(a.keyIdx) + len(a.attrIdx) + len(a.linkIdx) + len(a.mark) + len(a.extra)
}

// result returns what rec adds to a sample, adding its link and
// attributes to the dictionary (the caller keeps it with the record's run,
// so it is computed once per record and message).
func (ad *additions) result(rec *catalog.ThreadRecord) recResult {
	var r recResult
	tr, sp := rec.Record.TraceID, rec.Record.SpanID
	if tr != ([16]byte{}) && sp != ([8]byte{}) {
		r.link = ad.linkIndex(tr, sp)
	}
	if kv := rec.SortedAttributes(); len(kv) > 0 {
		// The catalog shares one slice between records with the same
		// attributes: each distinct set is resolved once per message.
		if w, ok := ad.sets[&kv[0]]; ok {
			r.attrs, r.keys = w.attrs, w.keys
			return r
		}
		ad.indexAttributes()
		// Both slices are windows of the arena; a later append that moves
		// the arena leaves them on the old (unchanged) backing array.
		n, start := len(kv), len(ad.arena)
		ad.arena = slices.Grow(ad.arena, 2*n)[:start+2*n]
		w := ad.arena[start:]
		for i, a := range kv {
			// Parsed records are valid UTF-8 already (threadctx); the
			// rule holds on every path into pdata.
			w[n+i] = ad.keyIndex(pdataconv.Str(a.Key))
			w[i] = ad.attrIndex(w[n+i], pdataconv.Str(a.Value))
		}
		r.attrs, r.keys = w[:n:n], w[n:2*n:2*n]
		ad.sets[&kv[0]] = r
	}
	return r
}

// smallMerge: up to this many (record keys × sample attributes) pairs, a
// sample's merge compares them directly (no marking pass to pay).
const smallMerge = 64

// addAttributes appends r's attributes whose key the sample lacks (its own
// value of a key wins). Its cost is linear in the sample's attributes plus
// the record's: past smallMerge pairs, the sample's keys are marked once.
func (ad *additions) addAttributes(ai pcommon.Int32Slice, r recResult) {
	n0 := ai.Len()
	extra := ad.extra[:0]
	if n0*len(r.keys) <= smallMerge {
	outer:
		for i, ki := range r.keys {
			for j := range n0 {
				if idx := ai.At(j); idx > 0 && int(idx) < len(ad.keyOf) && ad.keyOf[idx] == ki {
					continue outer
				}
			}
			extra = append(extra, r.attrs[i])
		}
	} else {
		if n := ad.strs.Len(); len(ad.mark) < n {
			ad.mark = append(ad.mark, make([]uint32, n-len(ad.mark))...)
		}
		if ad.markGen++; ad.markGen == 0 { // wrapped: old stamps could match
			clear(ad.mark)
			ad.markGen = 1
		}
		for _, idx := range ai.All() {
			if idx > 0 && int(idx) < len(ad.keyOf) {
				if k := ad.keyOf[idx]; k > 0 && int(k) < len(ad.mark) {
					ad.mark[k] = ad.markGen
				}
			}
		}
		for i, ki := range r.keys {
			if ad.mark[ki] != ad.markGen {
				extra = append(extra, r.attrs[i])
			}
		}
	}
	if len(extra) > 0 {
		ai.EnsureCapacity(n0 + len(extra))
		ai.Append(extra...)
	}
	ad.extra = extra[:0]
}

// indexAttributes indexes the message's attribute table once, on the first
// record attribute set to resolve: its string attributes by (key, value),
// and its keys by their text. Entries whose keys are equal strings at
// different indices get the first one's index in keyOf, so that a sample's
// own value of a key is recognised whichever copy it names.
func (ad *additions) indexAttributes() {
	if ad.attrIdxBuilt {
		return
	}
	ad.attrIdxBuilt = true
	ad.keyOf = append(ad.keyOf[:0], ad.received...)
	if ad.attrs.Len() == 0 {
		ad.attrs.AppendEmpty() // index 0 is the empty attribute
		ad.keyOf = append(ad.keyOf, 0)
	}
	nStrs := int32(ad.strs.Len())
	prevRaw, prevKey := int32(-1), int32(-1) // entries of one key are often adjacent
	for i := 1; i < ad.attrs.Len(); i++ {
		k := ad.keyOf[i]
		if k > 0 && k < nStrs {
			if k == prevRaw {
				k = prevKey
			} else {
				prevRaw = k
				s := ad.strs.At(int(k))
				if first, ok := ad.keyIdx[s]; ok {
					k = first
				} else {
					ad.keyIdx[s] = k
				}
				prevKey = k
			}
			ad.keyOf[i] = k
		}
		kv := ad.attrs.At(i)
		if kv.UnitStrindex() == 0 && kv.Value().Type() == pcommon.ValueTypeStr {
			ak := attrKey{k, kv.Value().Str()}
			if _, dup := ad.attrIdx[ak]; !dup {
				ad.attrIdx[ak] = int32(i)
			}
		}
	}
}

// keyIndex returns the string table index of the attribute key s: the one
// the message's attributes already use for it, else a new entry. Only
// strings used as keys matter to the join (a sample's own value of a key
// wins), so the rest of the table, which may hold millions of strings, is
// never searched; an equal string used otherwise costs one more entry.
func (ad *additions) keyIndex(s string) int32 {
	if i, ok := ad.keyIdx[s]; ok {
		return i
	}
	if ad.strs.Len() == 0 {
		ad.strs.Append("") // index 0 is the empty string
	}
	ad.strs.Append(s)
	i := int32(ad.strs.Len() - 1)
	ad.keyIdx[s] = i
	return i
}

// attrIndex returns the index of the string attribute key=val, adding it
// if the table has no equal entry (indexAttributes has run).
func (ad *additions) attrIndex(key int32, val string) int32 {
	k := attrKey{key, val}
	if i, ok := ad.attrIdx[k]; ok {
		return i
	}
	kv := ad.attrs.AppendEmpty()
	kv.SetKeyStrindex(key)
	kv.Value().SetStr(val)
	i := int32(ad.attrs.Len() - 1)
	ad.attrIdx[k] = i
	ad.keyOf = append(ad.keyOf, key)
	return i
}

// linkIndex returns the index of the link (trace, span), adding it if the
// table has no equal entry.
func (ad *additions) linkIndex(trace [16]byte, span [8]byte) int32 {
	if !ad.linkIdxBuilt {
		ad.linkIdxBuilt = true
		if ad.links.Len() == 0 {
			ad.links.AppendEmpty() // index 0 is the empty link
		}
		for i := 1; i < ad.links.Len(); i++ {
			l := ad.links.At(i)
			k := linkKey(l.TraceID(), l.SpanID())
			if _, dup := ad.linkIdx[k]; !dup {
				ad.linkIdx[k] = int32(i)
			}
		}
	}
	k := linkKey(trace, span)
	if i, ok := ad.linkIdx[k]; ok {
		return i
	}
	l := ad.links.AppendEmpty()
	l.SetTraceID(trace)
	l.SetSpanID(span)
	i := int32(ad.links.Len() - 1)
	ad.linkIdx[k] = i
	return i
}

func linkKey(trace [16]byte, span [8]byte) (k [24]byte) {
	copy(k[:16], trace[:])
	copy(k[16:], span[:])
	return k
}

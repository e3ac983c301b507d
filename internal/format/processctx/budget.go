// SPDX-License-Identifier: Apache-2.0

package processctx

import (
	"errors"
	"unsafe"
)

// ErrBudget: decoding the payload would cost more than Limits.MaxDecodedSize.
var ErrBudget = errors.New("process context over its decoding budget")

// DecodedSizeMultiple: by default a decoded context may cost at most this
// many times the largest payload accepted (Limits.MaxPayloadSize).
const DecodedSizeMultiple = 2

// MaxEntityRefs bounds the entity references kept, one per entity type.
const MaxEntityRefs = 16

// What the decoder charges: the Go size of what it allocates. A value of
// a few wire bytes (an empty AnyValue is 2) is a Value of valueSize bytes.
const (
	valueSize     = int(unsafe.Sizeof(Value{}))
	attributeSize = int(unsafe.Sizeof(Attribute{}))
	entityRefSize = int(unsafe.Sizeof(EntityRef{}))
	stringSize    = int(unsafe.Sizeof(""))
)

// maxDecodedSize is the budget of one context.
func (l Limits) maxDecodedSize() int {
	if l.MaxDecodedSize > 0 {
		return l.MaxDecodedSize
	}
	return DecodedSizeMultiple * int(max(l.MaxPayloadSize, DefaultMaxPayloadSize))
}

// charge records n bytes about to be allocated, plus an eighth: the heap
// rounds an allocation up to its size class, by at most that. Over the
// budget, the decoding stops at the next element or list (ErrBudget).
func (d *decoder) charge(n int) { d.stats.DecodedSize += n + n/8 }

func (d *decoder) over() bool { return d.stats.DecodedSize > d.budget }

// checkBudget is called before each list element and each allocation.
func (d *decoder) checkBudget() error {
	if d.over() {
		return ErrBudget
	}
	return nil
}

// AttributesSize estimates what attrs cost in memory (decoded, or copied
// into pdata): every value, key and string or bytes it holds.
func AttributesSize(attrs []Attribute) int {
	n := 0
	for i := range attrs {
		n += attributeSize + len(attrs[i].Key) + ValueSize(attrs[i].Value)
	}
	return n
}

// ValueSize is AttributesSize for one value, its own struct excluded.
func ValueSize(v Value) int {
	n := len(v.Str) + len(v.Bytes)
	for i := range v.Array {
		n += valueSize + ValueSize(v.Array[i])
	}
	return n + AttributesSize(v.KVList)
}

// chargeEntityRefs charges the copies of resource attributes that the
// entity references ask for: each entity event holds the attributes its
// reference names, so 16 references naming the largest attribute would
// cost 16 times it.
func (d *decoder) chargeEntityRefs(r *Resource) {
	if len(r.EntityRefs) == 0 {
		return
	}
	sizes := make(map[string]int, len(r.Attributes))
	for i := range r.Attributes {
		a := &r.Attributes[i]
		sizes[a.Key] = attributeSize + len(a.Key) + ValueSize(a.Value)
	}
	for i := range r.EntityRefs {
		e := &r.EntityRefs[i]
		for _, keys := range [][]string{e.IDKeys, e.DescriptionKeys} {
			for _, k := range keys {
				d.charge(sizes[k])
			}
		}
	}
}

// addEntityRef keeps one reference per entity type (the first), at most
// MaxEntityRefs, each key named once.
func (d *decoder) addEntityRef(r *Resource, e EntityRef) {
	for i := range r.EntityRefs {
		if r.EntityRefs[i].Type == e.Type {
			d.stats.DuplicateKeys++
			return
		}
	}
	if len(r.EntityRefs) >= d.maxEntityRefs() {
		d.stats.DroppedAttributes++
		return
	}
	e.IDKeys = d.uniqueKeys(e.IDKeys)
	e.DescriptionKeys = d.uniqueKeys(e.DescriptionKeys)
	r.EntityRefs = append(r.EntityRefs, e)
}

func (d *decoder) maxEntityRefs() int { return min(MaxEntityRefs, d.lim.MaxAttributes) }

func (d *decoder) uniqueKeys(keys []string) []string {
	out := keys[:0]
	for _, k := range keys {
		dup := false
		for _, o := range out {
			if o == k {
				dup = true
				break
			}
		}
		if dup {
			d.stats.DuplicateKeys++
			continue
		}
		out = append(out, k)
	}
	return out
}

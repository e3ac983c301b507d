// SPDX-License-Identifier: Apache-2.0

package processctx

import (
	"maps"
	"math"
	"slices"
)

// SameContent reports whether c and o publish the same thing: the same
// resource (attributes, dropped count, entity refs), extra attributes and
// thread-local reference data. The stamp (PublishedAtNs) is not compared: a
// publisher may rewrite it with an unchanged payload. Doubles compare by
// their bits, so that a NaN equals itself.
func (c Context) SameContent(o Context) bool {
	return sameResource(c.Resource, o.Resource) &&
		sameAttributes(c.Attributes, o.Attributes) &&
		c.ThreadLocal.SchemaVersion == o.ThreadLocal.SchemaVersion &&
		slices.Equal(c.ThreadLocal.AttributeKeyMap, o.ThreadLocal.AttributeKeyMap) &&
		maps.Equal(c.ThreadLocal.Ints, o.ThreadLocal.Ints)
}

func sameResource(a, b Resource) bool {
	if a.DroppedAttributesCount != b.DroppedAttributesCount || len(a.EntityRefs) != len(b.EntityRefs) ||
		!sameAttributes(a.Attributes, b.Attributes) {
		return false
	}
	for i := range a.EntityRefs {
		x, y := &a.EntityRefs[i], &b.EntityRefs[i]
		if x.SchemaURL != y.SchemaURL || x.Type != y.Type ||
			!slices.Equal(x.IDKeys, y.IDKeys) || !slices.Equal(x.DescriptionKeys, y.DescriptionKeys) {
			return false
		}
	}
	return true
}

func sameAttributes(a, b []Attribute) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !sameValue(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

func sameValue(a, b Value) bool {
	if a.Kind != b.Kind {
		return false
	}
	switch a.Kind {
	case KindStr:
		return a.Str == b.Str
	case KindBool:
		return a.Bool == b.Bool
	case KindInt:
		return a.Int == b.Int
	case KindDouble:
		return math.Float64bits(a.Double) == math.Float64bits(b.Double)
	case KindBytes:
		return string(a.Bytes) == string(b.Bytes)
	case KindArray:
		if len(a.Array) != len(b.Array) {
			return false
		}
		for i := range a.Array {
			if !sameValue(a.Array[i], b.Array[i]) {
				return false
			}
		}
		return true
	case KindKVList:
		return sameAttributes(a.KVList, b.KVList)
	}
	return true // KindEmpty (or unknown: no value decoded)
}

// SPDX-License-Identifier: Apache-2.0

package processctx

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Limits bound what one publisher can make this reader allocate or emit.
type Limits struct {
	// MaxPayloadSize: larger payloads are refused unread (ErrPayloadSize).
	MaxPayloadSize uint32
	// MaxAttributes bounds each attribute list (resource, extra, nested);
	// the rest is dropped and counted.
	MaxAttributes int
	// MaxValueLength: longer strings, bytes and keys are cut at a UTF-8 boundary.
	MaxValueLength int
	// MaxDepth: deeper values become empty and count as dropped.
	MaxDepth int
	// MaxDecodedSize bounds what one context may cost in memory, all lists
	// together: the Go size of every value, attribute and string decoded,
	// plus the copies its entity references name (AttributesSize). Over
	// it the context is refused (ErrBudget). 0: DecodedSizeMultiple times
	// max(MaxPayloadSize, DefaultMaxPayloadSize).
	MaxDecodedSize int
}

func DefaultLimits() Limits {
	return Limits{
		MaxPayloadSize: DefaultMaxPayloadSize,
		MaxAttributes:  128,
		MaxValueLength: 4096,
		MaxDepth:       8,
	}
}

type DecodeStats struct {
	DroppedAttributes int // list entries beyond MaxAttributes or deeper than MaxDepth
	TruncatedValues   int // strings or bytes cut to MaxValueLength
	DuplicateKeys     int // keys that appeared again in the same list (last wins), repeated entity types and keys
	// InvalidUTF8 counts strings (values, keys, entity refs) whose
	// invalid UTF-8 was replaced by U+FFFD.
	InvalidUTF8 int
	// DecodedSize is what the context costs (Limits.MaxDecodedSize).
	DecodedSize int
}

func (s DecodeStats) Exceeded() bool { return s.DroppedAttributes > 0 || s.TruncatedValues > 0 }

// Field numbers of the messages involved (opentelemetry-proto).
const (
	fProcessContextResource   = 1
	fProcessContextAttributes = 2

	fResourceAttributes = 1
	fResourceDropped    = 2
	fResourceEntityRefs = 3

	fEntityRefSchemaURL       = 1
	fEntityRefType            = 2
	fEntityRefIDKeys          = 3
	fEntityRefDescriptionKeys = 4

	fKeyValueKey   = 1
	fKeyValueValue = 2

	fAnyString = 1
	fAnyBool   = 2
	fAnyInt    = 3
	fAnyDouble = 4
	fAnyArray  = 5
	fAnyKVList = 6
	fAnyBytes  = 7

	fListValues = 1 // ArrayValue.values and KeyValueList.values
)

var threadLocalPrefix = []byte(ThreadLocalPrefix)

type decoder struct {
	lim   Limits
	stats DecodeStats
	// Dropped: the publisher's last count plus ours, saturated at MaxUint32.
	resDropped, resLimitDrops uint64
	// arena backs the decoded strings (disjoint parts of the payload).
	arena     []byte
	remaining int
	budget    int
}

// Decode skips unknown fields, as protobuf requires.
func Decode(payload []byte, lim Limits) (Context, DecodeStats, error) {
	d := decoder{lim: lim, remaining: len(payload), budget: lim.maxDecodedSize()}
	var c Context
	var extra []Attribute
	if n := countFields(payload, fProcessContextAttributes); n > 0 {
		extra = d.attributes(n, lim.MaxAttributes)
	}
	err := walk(payload, func(num protowire.Number, typ protowire.Type, b []byte, _ uint64) error {
		switch num {
		case fProcessContextResource:
			if typ != protowire.BytesType {
				return errWireType("ProcessContext.resource", typ)
			}
			// A repeated singular message field merges, as in protobuf.
			return d.resource(b, &c.Resource)
		case fProcessContextAttributes:
			if typ != protowire.BytesType {
				return errWireType("ProcessContext.attributes", typ)
			}
			_, err := d.keyValueInto(b, &extra, 1, true)
			return err
		}
		return nil
	})
	if err == nil {
		d.chargeEntityRefs(&c.Resource)
		err = d.checkBudget()
	}
	if errors.Is(err, ErrBudget) {
		return Context{}, d.stats, fmt.Errorf("%w: more than %d bytes decoded from %d", ErrBudget, d.budget, len(payload))
	}
	if err != nil {
		return Context{}, d.stats, fmt.Errorf("%w: %w", ErrMalformedPayload, err)
	}
	c.Resource.DroppedAttributesCount = uint32(min(d.resDropped+d.resLimitDrops, math.MaxUint32))
	// threadlocal.* is reference data for thread-context readers, not telemetry.
	attrs := extra[:0]
	for _, a := range extra {
		switch {
		case a.Key == KeySchemaVersion:
			c.ThreadLocal.SchemaVersion = a.Value.AsString()
		case a.Key == KeyAttributeKeyMap:
			c.ThreadLocal.AttributeKeyMap = keyMap(a.Value)
		case isThreadLocal(a.Key):
			// Other threadlocal.* keys are coordination data: integers kept, the rest dropped.
			if v := a.Value; v.Kind == KindInt && len(c.ThreadLocal.Ints) < maxThreadLocalInts {
				if c.ThreadLocal.Ints == nil {
					c.ThreadLocal.Ints = map[string]int64{}
				}
				c.ThreadLocal.Ints[a.Key] = v.Int
			}
		default:
			attrs = append(attrs, a)
		}
	}
	if len(attrs) > 0 {
		c.Attributes = attrs
	}
	return c, d.stats, nil
}

// keyMap keeps a non-string entry's index (empty name), so later indexes keep meaning.
func keyMap(v Value) []string {
	if v.Kind != KindArray {
		return nil
	}
	out := make([]string, len(v.Array))
	for i := range v.Array {
		out[i] = v.Array[i].AsString()
	}
	return out
}

func (d *decoder) resource(b []byte, r *Resource) error {
	if r.Attributes == nil {
		if n := countFields(b, fResourceAttributes); n > 0 {
			r.Attributes = d.attributes(n, d.lim.MaxAttributes)
		}
	}
	if r.EntityRefs == nil {
		if n := min(countFields(b, fResourceEntityRefs), d.maxEntityRefs()); n > 0 {
			d.charge(n * entityRefSize)
			r.EntityRefs = make([]EntityRef, 0, n)
		}
	}
	return walk(b, func(num protowire.Number, typ protowire.Type, b []byte, v uint64) error {
		switch num {
		case fResourceAttributes:
			if typ != protowire.BytesType {
				return errWireType("Resource.attributes", typ)
			}
			dropped, err := d.keyValueInto(b, &r.Attributes, 1, false)
			if dropped {
				d.resLimitDrops++
			}
			return err
		case fResourceDropped:
			if typ != protowire.VarintType {
				return errWireType("Resource.dropped_attributes_count", typ)
			}
			d.resDropped = min(v, math.MaxUint32)
		case fResourceEntityRefs:
			if typ != protowire.BytesType {
				return errWireType("Resource.entity_refs", typ)
			}
			if len(r.EntityRefs) >= d.maxEntityRefs() {
				d.stats.DroppedAttributes++
				return nil
			}
			ref, err := d.entityRef(b)
			if err != nil {
				return err
			}
			d.addEntityRef(r, ref)
			return d.checkBudget()
		}
		return nil
	})
}

func (d *decoder) entityRef(b []byte) (EntityRef, error) {
	var e EntityRef
	err := walk(b, func(num protowire.Number, typ protowire.Type, b []byte, _ uint64) error {
		if num < fEntityRefSchemaURL || num > fEntityRefDescriptionKeys {
			return nil
		}
		if typ != protowire.BytesType {
			return errWireType("EntityRef", typ)
		}
		if err := d.checkBudget(); err != nil {
			return err
		}
		s := d.str(b)
		switch num {
		case fEntityRefSchemaURL:
			e.SchemaURL = s
		case fEntityRefType:
			e.Type = s
		case fEntityRefIDKeys:
			if len(e.IDKeys) < d.lim.MaxAttributes {
				d.charge(stringSize)
				e.IDKeys = append(e.IDKeys, s)
			} else {
				d.stats.DroppedAttributes++
			}
		case fEntityRefDescriptionKeys:
			if len(e.DescriptionKeys) < d.lim.MaxAttributes {
				d.charge(stringSize)
				e.DescriptionKeys = append(e.DescriptionKeys, s)
			} else {
				d.stats.DroppedAttributes++
			}
		}
		return nil
	})
	return e, err
}

// keyValueInto: a later duplicate key replaces the earlier entry.
// topLevelExtra relaxes the array limit for the key map (256 indexes by format).
func (d *decoder) keyValueInto(b []byte, list *[]Attribute, depth int, topLevelExtra bool) (dropped bool, err error) {
	if err := d.checkBudget(); err != nil {
		return false, err
	}
	var key string
	var valBytes []byte
	hasVal := false
	err = walk(b, func(num protowire.Number, typ protowire.Type, b []byte, _ uint64) error {
		switch num {
		case fKeyValueKey:
			if typ != protowire.BytesType {
				return errWireType("KeyValue.key", typ)
			}
			if topLevelExtra && bytes.HasPrefix(b, threadLocalPrefix) {
				// Not truncated: a cut threadlocal.* key would no longer be
				// recognised and would leak out as a telemetry attribute.
				d.charge(len(b))
				key = string(b)
			} else {
				key = d.str(b)
			}
		case fKeyValueValue:
			if typ != protowire.BytesType {
				return errWireType("KeyValue.value", typ)
			}
			valBytes, hasVal = b, true
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	// Decoded after the key is known (any field order): limits depend on it.
	var val Value
	if hasVal {
		lim := d.lim.MaxAttributes
		if topLevelExtra && key == KeyAttributeKeyMap {
			lim = max(lim, MaxAttributeKeyMapEntries)
		}
		if val, err = d.anyValue(valBytes, depth, lim); err != nil {
			return false, err
		}
	}
	for i := range *list {
		if (*list)[i].Key == key {
			(*list)[i].Value = val
			d.stats.DuplicateKeys++
			return false, nil
		}
	}
	// The two thread-context keys are kept past the limit, so a publisher
	// with many extra attributes still has its key map read.
	reference := topLevelExtra && (key == KeySchemaVersion || key == KeyAttributeKeyMap)
	if len(*list) >= d.lim.MaxAttributes && !reference {
		d.stats.DroppedAttributes++
		return true, nil
	}
	if len(*list) == cap(*list) {
		d.charge((cap(*list) + 1) * attributeSize) // append's new backing array, at least
	}
	*list = append(*list, Attribute{Key: key, Value: val})
	return false, d.checkBudget()
}

func (d *decoder) anyValue(b []byte, depth, listLimit int) (Value, error) {
	var v Value
	err := walk(b, func(num protowire.Number, typ protowire.Type, b []byte, x uint64) error {
		// A oneof seen twice: the last one wins, as in protobuf.
		switch num {
		case fAnyString:
			if typ != protowire.BytesType {
				return errWireType("AnyValue.string_value", typ)
			}
			v = Value{Kind: KindStr, Str: d.str(b)}
		case fAnyBool:
			if typ != protowire.VarintType {
				return errWireType("AnyValue.bool_value", typ)
			}
			v = Value{Kind: KindBool, Bool: x != 0}
		case fAnyInt:
			if typ != protowire.VarintType {
				return errWireType("AnyValue.int_value", typ)
			}
			v = Value{Kind: KindInt, Int: int64(x)}
		case fAnyDouble:
			if typ != protowire.Fixed64Type {
				return errWireType("AnyValue.double_value", typ)
			}
			v = Value{Kind: KindDouble, Double: math.Float64frombits(x)}
		case fAnyBytes:
			if typ != protowire.BytesType {
				return errWireType("AnyValue.bytes_value", typ)
			}
			v = Value{Kind: KindBytes, Bytes: d.bytes(b)}
		case fAnyArray, fAnyKVList:
			if typ != protowire.BytesType {
				return errWireType("AnyValue.array_value/kvlist_value", typ)
			}
			if depth >= d.lim.MaxDepth {
				d.stats.DroppedAttributes++
				v = Value{}
				return nil
			}
			if num == fAnyArray {
				arr, err := d.array(b, depth+1, listLimit)
				v = Value{Kind: KindArray, Array: arr}
				return err
			}
			kvs, err := d.kvlist(b, depth+1)
			v = Value{Kind: KindKVList, KVList: kvs}
			return err
		}
		return nil
	})
	return v, err
}

func (d *decoder) array(b []byte, depth, limit int) ([]Value, error) {
	n := min(countFields(b, fListValues), limit)
	d.charge(n * valueSize)
	if err := d.checkBudget(); err != nil {
		return nil, err
	}
	out := make([]Value, 0, n)
	err := walk(b, func(num protowire.Number, typ protowire.Type, b []byte, _ uint64) error {
		if num != fListValues {
			return nil
		}
		if typ != protowire.BytesType {
			return errWireType("ArrayValue.values", typ)
		}
		if err := d.checkBudget(); err != nil {
			return err
		}
		if len(out) >= limit {
			d.stats.DroppedAttributes++
			return nil
		}
		v, err := d.anyValue(b, depth, d.lim.MaxAttributes)
		if err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

func (d *decoder) kvlist(b []byte, depth int) ([]Attribute, error) {
	out := d.attributes(countFields(b, fListValues), d.lim.MaxAttributes)
	if err := d.checkBudget(); err != nil {
		return nil, err
	}
	err := walk(b, func(num protowire.Number, typ protowire.Type, b []byte, _ uint64) error {
		if num != fListValues {
			return nil
		}
		if typ != protowire.BytesType {
			return errWireType("KeyValueList.values", typ)
		}
		_, err := d.keyValueInto(b, &out, depth, false)
		return err
	})
	return out, err
}

// attributes allocates a list for n entries, at most limit, charged.
func (d *decoder) attributes(n, limit int) []Attribute {
	n = min(n, limit)
	d.charge(n * attributeSize)
	if d.over() {
		return nil
	}
	return make([]Attribute, 0, n)
}

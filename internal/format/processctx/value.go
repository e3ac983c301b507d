// SPDX-License-Identifier: Apache-2.0

package processctx

import "strings"

type ValueKind uint8

// KindEmpty is an AnyValue with no value set.
const (
	KindEmpty ValueKind = iota
	KindStr
	KindBool
	KindInt
	KindDouble
	KindBytes
	KindArray
	KindKVList
)

var kindNames = [...]string{"empty", "string", "bool", "int", "double", "bytes", "array", "kvlist"}

func (k ValueKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

type Value struct {
	Kind   ValueKind
	Str    string
	Int    int64
	Double float64
	Bool   bool
	Bytes  []byte
	Array  []Value
	KVList []Attribute
}

type Attribute struct {
	Key   string
	Value Value
}

// EntityRef names which Resource attributes identify and describe one entity.
type EntityRef struct {
	SchemaURL       string
	Type            string
	IDKeys          []string
	DescriptionKeys []string
}

type Resource struct {
	Attributes             []Attribute
	DroppedAttributesCount uint32
	EntityRefs             []EntityRef
}

// ThreadLocal is coordination metadata for OTEP 4947 readers ("threadlocal.*"), not telemetry.
type ThreadLocal struct {
	// SchemaVersion is e.g. "tlsdesc_v1_dev", "tls_v1" or "go_pprof_labels_v1".
	SchemaVersion   string
	AttributeKeyMap []string
	// Ints are the other integer threadlocal.* keys (at most maxThreadLocalInts,
	// first kept): layout constants a schema's reader may need, e.g. nodejs_v1_dev's.
	Ints map[string]int64
}

const (
	ThreadLocalPrefix         = "threadlocal."
	KeySchemaVersion          = "threadlocal.schema_version"
	KeyAttributeKeyMap        = "threadlocal.attribute_key_map"
	MaxAttributeKeyMapEntries = 256 // key indexes are uint8
	maxThreadLocalInts        = 16
)

type Context struct {
	// PublishedAtNs is an opaque, increasing version.
	PublishedAtNs uint64
	Resource      Resource
	// Attributes are ProcessContext.attributes without the threadlocal.* keys.
	Attributes  []Attribute
	ThreadLocal ThreadLocal
}

func Lookup(attrs []Attribute, key string) (Value, bool) {
	for i := range attrs {
		if attrs[i].Key == key {
			return attrs[i].Value, true
		}
	}
	return Value{}, false
}

// AsString is the OTel string form of a scalar; composites render "".
func (v Value) AsString() string {
	switch v.Kind {
	case KindStr:
		return v.Str
	default:
		return ""
	}
}

// AsRaw gives plain Go values for JSON; NaN and infinities have no JSON
// form, so a JSON writer renders those itself.
func (v Value) AsRaw() any {
	switch v.Kind {
	case KindStr:
		return v.Str
	case KindBool:
		return v.Bool
	case KindInt:
		return v.Int
	case KindDouble:
		return v.Double
	case KindBytes:
		return v.Bytes
	case KindArray:
		out := make([]any, len(v.Array))
		for i := range v.Array {
			out[i] = v.Array[i].AsRaw()
		}
		return out
	case KindKVList:
		return AttributesAsRaw(v.KVList)
	default:
		return nil
	}
}

// AttributesAsRaw: a later duplicate key wins.
func AttributesAsRaw(attrs []Attribute) map[string]any {
	out := make(map[string]any, len(attrs))
	for i := range attrs {
		out[attrs[i].Key] = attrs[i].Value.AsRaw()
	}
	return out
}

func isThreadLocal(key string) bool { return strings.HasPrefix(key, ThreadLocalPrefix) }

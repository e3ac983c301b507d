package processctx

import "strings"

// ValueKind is the kind of an AnyValue.
type ValueKind uint8

// The AnyValue kinds. KindEmpty is an AnyValue with no value set.
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

// Value is a decoded opentelemetry.proto.common.v1.AnyValue.
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

// Attribute is a decoded KeyValue.
type Attribute struct {
	Key   string
	Value Value
}

// EntityRef is a decoded opentelemetry.proto.common.v1.EntityRef: it names
// which attributes of the Resource identify and describe one entity.
type EntityRef struct {
	SchemaURL       string
	Type            string
	IDKeys          []string
	DescriptionKeys []string
}

// Resource is a decoded opentelemetry.proto.resource.v1.Resource.
type Resource struct {
	Attributes             []Attribute
	DroppedAttributesCount uint32
	EntityRefs             []EntityRef
}

// ThreadLocal is the thread-context reference data a process publishes in
// its extra attributes (keys "threadlocal.*"). It is coordination metadata for
// readers of OTEP 4947 thread context, not telemetry.
type ThreadLocal struct {
	// SchemaVersion is e.g. "tlsdesc_v1_dev", "tls_v1" or "go_pprof_labels_v1".
	SchemaVersion string
	// AttributeKeyMap maps a record's key index to an attribute name.
	AttributeKeyMap []string
}

// Thread-local keys in ProcessContext.attributes.
const (
	ThreadLocalPrefix         = "threadlocal."
	KeySchemaVersion          = "threadlocal.schema_version"
	KeyAttributeKeyMap        = "threadlocal.attribute_key_map"
	MaxAttributeKeyMapEntries = 256 // key indexes are uint8
)

// Context is a decoded ProcessContext.
type Context struct {
	// PublishedAtNs is the header's stamp: an opaque, increasing version.
	PublishedAtNs uint64
	Resource      Resource
	// Attributes are ProcessContext.attributes without the threadlocal.* keys.
	Attributes  []Attribute
	ThreadLocal ThreadLocal
}

// Lookup returns the value of key in attrs.
func Lookup(attrs []Attribute, key string) (Value, bool) {
	for i := range attrs {
		if attrs[i].Key == key {
			return attrs[i].Value, true
		}
	}
	return Value{}, false
}

// AsString renders a value as the OTel specification's string form of a
// scalar; composite values render as "".
func (v Value) AsString() string {
	switch v.Kind {
	case KindStr:
		return v.Str
	default:
		return ""
	}
}

// AsRaw converts v to plain Go values that encode naturally as JSON:
// arrays become []any, kvlists map[string]any, bytes []byte. A NaN or
// infinite double has no JSON form: encoding/json refuses it, so a JSON
// writer must render those itself (the CLI writes them as strings).
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

// AttributesAsRaw converts attributes to a map; a later duplicate key wins.
func AttributesAsRaw(attrs []Attribute) map[string]any {
	out := make(map[string]any, len(attrs))
	for i := range attrs {
		out[attrs[i].Key] = attrs[i].Value.AsRaw()
	}
	return out
}

// isThreadLocal reports whether key is thread-context reference data.
func isThreadLocal(key string) bool { return strings.HasPrefix(key, ThreadLocalPrefix) }

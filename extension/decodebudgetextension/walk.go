// SPDX-License-Identifier: Apache-2.0

package decodebudgetextension

import (
	"encoding/binary"
	"errors"
)

// The messages of an OTLP profiles export request, as pdata decodes them:
// for each, the fields that hold a message (decoded into a struct of its
// own, which is what makes a message of empty ones grow some 70x).
type msgKind uint8

const (
	kNone msgKind = iota // a scalar, string or bytes field
	kRequest
	kResourceProfiles
	kScopeProfiles
	kProfile
	kDictionary
	kSample
	kLocation
	kLine
	kStack
	kMapping
	kFunction
	kLink
	kResource
	kScope
	kValueType
	kEntityRef
	kKeyValueAndUnit
	kKeyValue
	kAnyValue
	kArrayValue
	kKeyValueList
	kTracesRequest
	kResourceSpans
	kScopeSpans
	kSpan
	kSpanEvent
	kSpanLink
	kLogsRequest
	kResourceLogs
	kScopeLogs
	kLogRecord
	kindCount
)

// children[kind][field] is the kind of the message a field holds; fields
// not listed are not messages. Field numbers: opentelemetry-proto's
// profiles v1development (pdata v1.71's generated_proto_*.go).
// An array per kind, not a map: looked up once per field on the wire.
var children = func() [kindCount][maxField + 1]msgKind {
	var c [kindCount][maxField + 1]msgKind
	set := func(k msgKind, m map[uint64]msgKind) {
		for f, child := range m {
			c[k][f] = child
		}
	}
	set(kRequest, map[uint64]msgKind{1: kResourceProfiles, 2: kDictionary})
	set(kResourceProfiles, map[uint64]msgKind{1: kResource, 2: kScopeProfiles})
	set(kScopeProfiles, map[uint64]msgKind{1: kScope, 2: kProfile})
	set(kProfile, map[uint64]msgKind{1: kValueType, 2: kSample, 5: kValueType})
	set(kDictionary, map[uint64]msgKind{1: kMapping, 2: kLocation, 3: kFunction, 4: kLink, 6: kKeyValueAndUnit, 7: kStack})
	set(kLocation, map[uint64]msgKind{3: kLine})
	set(kResource, map[uint64]msgKind{1: kKeyValue, 3: kEntityRef})
	set(kScope, map[uint64]msgKind{3: kKeyValue})
	set(kKeyValueAndUnit, map[uint64]msgKind{2: kAnyValue})
	set(kKeyValue, map[uint64]msgKind{2: kAnyValue})
	set(kAnyValue, map[uint64]msgKind{5: kArrayValue, 6: kKeyValueList})
	set(kArrayValue, map[uint64]msgKind{1: kAnyValue})
	set(kKeyValueList, map[uint64]msgKind{1: kKeyValue})
	// Traces and logs (trace and span IDs are bytes, not messages).
	set(kTracesRequest, map[uint64]msgKind{1: kResourceSpans})
	set(kResourceSpans, map[uint64]msgKind{1: kResource, 2: kScopeSpans})
	set(kScopeSpans, map[uint64]msgKind{1: kScope, 2: kSpan})
	set(kSpan, map[uint64]msgKind{9: kKeyValue, 11: kSpanEvent, 13: kSpanLink})
	set(kSpanEvent, map[uint64]msgKind{3: kKeyValue})
	set(kSpanLink, map[uint64]msgKind{4: kKeyValue})
	set(kLogsRequest, map[uint64]msgKind{1: kResourceLogs})
	set(kResourceLogs, map[uint64]msgKind{1: kResource, 2: kScopeLogs})
	set(kScopeLogs, map[uint64]msgKind{1: kScope, 2: kLogRecord})
	set(kLogRecord, map[uint64]msgKind{5: kAnyValue, 6: kKeyValue})
	return c
}()

// maxField is the largest field number of a message field above but the
// deprecated scope_spans and scope_logs (1000, which pdata still decodes).
const maxField = 15

// deprecatedScopes is the field number of those two.
const deprecatedScopes = 1000

// maxDepth bounds the nesting walked (attribute values nest, 3 levels a
// map): deeper is refused as malformed, so the walk's stack is bounded
// whatever it reads. pdata decodes 100 levels of values.
const maxDepth = 3*100 + 8

var (
	errMalformed   = errors.New("malformed protobuf")
	errTooMany     = errors.New("too many elements")
	errTooDeep     = errors.New("nested too deep")
	errWrongWire   = errors.New("a message field with a wire type other than length-delimited")
	errUnsupported = errors.New("unsupported wire type")
)

// countElements counts what decoding an ExportProfilesServiceRequest
// allocates a struct for: every sub-message on the request's message path
// (samples, dictionary entries, attributes and their values), at any
// depth. Strings, bytes and packed numbers are not counted: they decode to
// at most some 8x their wire bytes, which the message's size bounds. It
// stops with errTooMany past max, and refuses input pdata would refuse too
// (truncated, wrong wire types, groups). It allocates nothing.
func countElements(b []byte, max int) (int, error) {
	return countElementsOf(b, kRequest, max)
}

// countElementsOf counts as countElements from the request of kind root
// (kRequest, kTracesRequest, kLogsRequest).
func countElementsOf(b []byte, root msgKind, max int) (int, error) {
	n := 0
	err := walk(b, root, 0, &n, max)
	return n, err
}

func walk(b []byte, kind msgKind, depth int, n *int, max int) error {
	if depth > maxDepth {
		return errTooDeep
	}
	fields := &children[kind]
	for len(b) > 0 {
		tag, l := binary.Uvarint(b)
		if l <= 0 {
			return errMalformed
		}
		b = b[l:]
		// As pdata reads it (int32(tag>>3)): a number with high bits set
		// is the field its low 32 bits name, not an unknown field to skip.
		n32, wire := int32(tag>>3), tag&7
		if n32 <= 0 {
			return errMalformed
		}
		num := uint64(n32)
		child := kNone
		switch {
		case num <= maxField:
			child = fields[num]
		case num == deprecatedScopes && kind == kResourceSpans:
			child = kScopeSpans
		case num == deprecatedScopes && kind == kResourceLogs:
			child = kScopeLogs
		}
		switch wire {
		case 0: // varint
			_, l := binary.Uvarint(b)
			if l <= 0 {
				return errMalformed
			}
			b = b[l:]
		case 1: // fixed64
			if len(b) < 8 {
				return errMalformed
			}
			b = b[8:]
		case 5: // fixed32
			if len(b) < 4 {
				return errMalformed
			}
			b = b[4:]
		case 2:
			size, l := binary.Uvarint(b)
			if l <= 0 || size > uint64(len(b)-l) {
				return errMalformed
			}
			body := b[l : l+int(size)]
			b = b[l+int(size):]
			if child != kNone {
				if *n++; *n > max {
					return errTooMany
				}
				if err := walk(body, child, depth+1, n, max); err != nil {
					return err
				}
			}
			continue
		default: // groups (3, 4) and 6, 7: refused (pdata skips groups in unknown fields; no OTLP field is one)
			return errUnsupported
		}
		if child != kNone {
			return errWrongWire
		}
	}
	return nil
}

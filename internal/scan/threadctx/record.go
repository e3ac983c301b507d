// Package threadctx parses an OpenTelemetry thread-local context record
// (OTEP 4947): the record that a thread's otel_thread_ctx_v1 TLS variable
// points at while it serves a request.
package threadctx

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// Record layout (byte-packed, host byte order).
const (
	HeaderSize       = 28
	offTraceID       = 0
	offSpanID        = 16
	offValid         = 24
	offTraceFlags    = 25
	offAttrsDataSize = 26

	// DefaultReadCap is the eBPF profiler's record limit: readers never read
	// more than this much of a record.
	DefaultReadCap = 640
)

// Sentinel errors for records that must be ignored.
var (
	// ErrShort: fewer than HeaderSize bytes.
	ErrShort = errors.New("thread context record shorter than its header")
	// ErrInvalid: valid != 1 (absent, being written, or garbage).
	ErrInvalid = errors.New("thread context record not valid")
)

// TraceID and SpanID are W3C ids.
type (
	TraceID [16]byte
	SpanID  [8]byte
)

func (t TraceID) String() string { return hex.EncodeToString(t[:]) }
func (s SpanID) String() string  { return hex.EncodeToString(s[:]) }

// IsZero reports an unset id.
func (t TraceID) IsZero() bool { return t == TraceID{} }

// IsZero reports an unset id.
func (s SpanID) IsZero() bool { return s == SpanID{} }

// Attr is one attrs_data entry: a key index into the process's
// threadlocal.attribute_key_map and a UTF-8 value.
type Attr struct {
	KeyIndex uint8
	Value    string
}

// Record is a decoded thread context record.
type Record struct {
	TraceID    TraceID
	SpanID     SpanID
	TraceFlags uint8
	// Attrs holds at most one entry per key index (the last occurrence),
	// in order of first appearance.
	Attrs []Attr
	// Truncated is set when attrs_data_size claimed more bytes than were
	// read (the read cap) or when a trailing entry was incomplete.
	Truncated bool
}

// AttrsDataSize returns the attrs_data_size field of a record header, so a
// reader can read the header first and then exactly what it needs.
func AttrsDataSize(header []byte) int {
	if len(header) < HeaderSize {
		return 0
	}
	return int(binary.NativeEndian.Uint16(header[offAttrsDataSize:]))
}

// Parse decodes a record from b, which holds the header and as much of
// attrs_data as the reader read (at most its read cap). Entries are
// [key u8][len u8][len bytes]; parsing stops at the first entry that the
// remaining bytes cannot hold; the last occurrence of a key index wins.
func Parse(b []byte) (Record, error) {
	var r Record
	if len(b) < HeaderSize {
		return r, fmt.Errorf("%w: %d bytes", ErrShort, len(b))
	}
	if b[offValid] != 1 {
		return r, fmt.Errorf("%w: valid=%d", ErrInvalid, b[offValid])
	}
	copy(r.TraceID[:], b[offTraceID:offSpanID])
	copy(r.SpanID[:], b[offSpanID:offValid])
	r.TraceFlags = b[offTraceFlags]
	size := int(binary.NativeEndian.Uint16(b[offAttrsDataSize:]))
	data := b[HeaderSize:]
	if size < len(data) {
		data = data[:size]
	} else if size > len(data) {
		r.Truncated = true
	}
	for len(data) >= 2 {
		key, n := data[0], int(data[1])
		if len(data) < 2+n {
			r.Truncated = true
			break
		}
		r.set(key, string(data[2:2+n]))
		data = data[2+n:]
	}
	if len(data) == 1 {
		r.Truncated = true
	}
	return r, nil
}

func (r *Record) set(key uint8, v string) {
	for i := range r.Attrs {
		if r.Attrs[i].KeyIndex == key {
			r.Attrs[i].Value = v
			return
		}
	}
	r.Attrs = append(r.Attrs, Attr{KeyIndex: key, Value: v})
}

// Named resolves key indexes through keyMap. Indexes outside the map are
// returned in unknown so the caller can refresh the map from the process
// context once and try again, then ignore them.
func (r Record) Named(keyMap []string) (named map[string]string, unknown []uint8) {
	named = make(map[string]string, len(r.Attrs))
	for _, a := range r.Attrs {
		if int(a.KeyIndex) < len(keyMap) && keyMap[a.KeyIndex] != "" {
			named[keyMap[a.KeyIndex]] = a.Value
		} else {
			unknown = append(unknown, a.KeyIndex)
		}
	}
	return named, unknown
}

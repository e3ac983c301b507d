// SPDX-License-Identifier: Apache-2.0

// Package threadctx parses an OTEP 4947 thread context record, the one a
// thread's otel_thread_ctx_v1 TLS variable points at.
package threadctx

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/otelctx/otelctx/internal/utf8safe"
)

// Record layout (byte-packed, host byte order).
const (
	HeaderSize       = 28
	offTraceID       = 0
	offSpanID        = 16
	offValid         = 24
	offTraceFlags    = 25
	offAttrsDataSize = 26

	// DefaultReadCap is the eBPF profiler's record limit.
	DefaultReadCap = 640
)

var (
	ErrShort = errors.New("thread context record shorter than its header")
	// ErrInvalid: valid != 1 (absent, being written, or garbage).
	ErrInvalid = errors.New("thread context record not valid")
)

type (
	TraceID [16]byte
	SpanID  [8]byte
)

func (t TraceID) String() string { return hex.EncodeToString(t[:]) }
func (s SpanID) String() string  { return hex.EncodeToString(s[:]) }

func (t TraceID) IsZero() bool { return t == TraceID{} }

func (s SpanID) IsZero() bool { return s == SpanID{} }

// Attr: KeyIndex indexes the process's threadlocal.attribute_key_map.
type Attr struct {
	KeyIndex uint8
	Value    string
}

type Record struct {
	TraceID    TraceID
	SpanID     SpanID
	TraceFlags uint8
	// Attrs: one per key index (the last wins), in order of first appearance.
	Attrs []Attr
	// Truncated: attrs_data_size claimed more than was read, or an entry was cut.
	Truncated bool
	// InvalidUTF8 counts values whose invalid UTF-8 was replaced by U+FFFD
	// (utf8safe): a record's values reach pdata as strings.
	InvalidUTF8 int
}

// AttrsDataSize lets a reader read the header, then exactly what it needs.
func AttrsDataSize(header []byte) int {
	if len(header) < HeaderSize {
		return 0
	}
	return int(binary.NativeEndian.Uint16(header[offAttrsDataSize:]))
}

// Parse decodes the header and what was read of attrs_data ([key u8][len u8][bytes]).
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
		v, replaced := utf8safe.Bytes(data[2 : 2+n])
		if replaced {
			r.InvalidUTF8++
		}
		r.set(key, string(v))
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

// Named returns unknown indexes so the caller can refresh the key map once.
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

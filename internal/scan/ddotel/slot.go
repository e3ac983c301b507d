package ddotel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/otelctx/otelctx/internal/scan/threadctx"
)

// Slot layout offsets (OffInUse is exported for the eBPF sampler).
const (
	offTraceHigh = 0
	offTraceLow  = 8
	offSpan      = 16
)

// Reasons a slot read is not trusted.
var (
	// ErrInProgress: in_use was 1 at one of the reads (a write was under way).
	ErrInProgress = errors.New("dd_otel_ctx: slot write in progress")
	// ErrTorn: in_use was 0 at both reads but the fields differ between
	// them: a whole write happened while the slot was being read, so
	// neither copy can be trusted to come from one write.
	ErrTorn = errors.New("dd_otel_ctx: slot changed during read")
)

// Slot is one thread's context, fields in host byte order as the writer
// stores them.
type Slot struct {
	TraceIDHigh, TraceIDLow, SpanID uint64
}

// ParseSlot decodes a 32-byte slot and its in_use flag (a non-zero byte is
// a write in progress: the writer only stores 0 and 1).
func ParseSlot(b []byte) (s Slot, inUse bool, err error) {
	if len(b) < SlotSize {
		return Slot{}, false, fmt.Errorf("%w: %d slot bytes", ErrShort, len(b))
	}
	s = Slot{
		TraceIDHigh: binary.NativeEndian.Uint64(b[offTraceHigh:]),
		TraceIDLow:  binary.NativeEndian.Uint64(b[offTraceLow:]),
		SpanID:      binary.NativeEndian.Uint64(b[offSpan:]),
	}
	return s, b[OffInUse] != 0, nil
}

// Consistent accepts a slot read twice (first, then again into second):
// in_use must be 0 in both copies and the 24 bytes of fields equal.
//
// The writer's protocol (in_use=1, fields, in_use=0) only lets a reader
// detect a write that overlaps one of its in_use reads: a whole write can
// fit between the first read's in_use check and its last field, giving a
// mix of two writes with in_use=0 on both sides. Comparing the fields of
// two full reads catches that too, unless the writer restored byte for
// byte the same mix in between (see README.md, residual risks).
func Consistent(first, second []byte) (Slot, error) {
	s, busy1, err := ParseSlot(first)
	if err != nil {
		return Slot{}, err
	}
	_, busy2, err := ParseSlot(second)
	if err != nil {
		return Slot{}, err
	}
	if busy1 || busy2 {
		return Slot{}, ErrInProgress
	}
	if !bytes.Equal(first[:OffInUse], second[:OffInUse]) {
		return Slot{}, ErrTorn
	}
	return s, nil
}

// IsZero reports a slot without a context: no trace id or no span id (the
// profiler clears a thread's context by writing zeros; OTEP 4947's rule
// "if trace_id or span_id is set, both are" makes half a context none).
func (s Slot) IsZero() bool {
	return s.TraceIDHigh == 0 && s.TraceIDLow == 0 || s.SpanID == 0
}

// Record converts the slot to a thread-context record: the W3C trace id is
// trace_id_high then trace_id_low, each big-endian (hex %016x%016x), the
// span id big-endian. The format has no trace flags and no attributes. A
// zero slot gives the zero Record (no ids).
func (s Slot) Record() threadctx.Record {
	var r threadctx.Record
	if s.IsZero() {
		return r
	}
	binary.BigEndian.PutUint64(r.TraceID[:8], s.TraceIDHigh)
	binary.BigEndian.PutUint64(r.TraceID[8:], s.TraceIDLow)
	binary.BigEndian.PutUint64(r.SpanID[:], s.SpanID)
	return r
}

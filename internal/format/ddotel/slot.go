// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddotel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/otelctx/otelctx/internal/format/threadctx"
)

const (
	offTraceHigh = 0
	offTraceLow  = 8
	offSpan      = 16
)

var (
	ErrInProgress = errors.New("dd_otel_ctx: slot write in progress")
	// ErrTorn: a whole write fit between the two reads; neither copy is trusted.
	ErrTorn = errors.New("dd_otel_ctx: slot changed during read")
)

// Slot is one thread's context, fields in host byte order.
type Slot struct {
	TraceIDHigh, TraceIDLow, SpanID uint64
}

// ParseSlot reports any non-zero in_use byte as a write in progress.
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

// Consistent accepts a slot read twice only if in_use is 0 in both copies
// and the fields are equal: in_use alone misses a whole write that fits
// inside one read (README.md, residual risks).
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

// IsZero: half a context is none (OTEP 4947: both ids or neither).
func (s Slot) IsZero() bool {
	return s.TraceIDHigh == 0 && s.TraceIDLow == 0 || s.SpanID == 0
}

// Record: the trace id is trace_id_high then trace_id_low, big-endian.
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

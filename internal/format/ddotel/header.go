// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package ddotel is the Datadog Java profiler's ctxstorage=otel ring
// buffer as bytes: its header, its slots and the rules over them (which
// threads share a slot, which value a new owner has not written yet).
// Finding a buffer in a process is internal/scan/ddscan's, reading its
// slots internal/threads/schema/ddring/ddslots's; README.md describes the layout and the
// PID-namespace rule.
package ddotel

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// SchemaName is the format's name: the thread-context schema's
// (internal/threads/schema/ddring), the one discovery sets on the buffers it
// finds (publisher.Buffer.Schema), and the source of the records read from
// them (publisher.SourceDD).
const SchemaName = "dd_otel_ctx"

const (
	// Magic is "OTEL" read as a big-endian u32, stored in host order.
	Magic      = 0x4F54454C
	Version    = 1
	HeaderSize = 32
	SlotSize   = 32
	OffInUse   = 24

	offVersion  = 4
	offCapacity = 8
	offSlotSize = 12
	// IdentSize is what discovery reads per candidate (the reserved half carries nothing).
	IdentSize = 16

	// MaxCapacity (PID_MAX_LIMIT, 64 times the profiler's default) bounds
	// anything sized from a header's claim.
	MaxCapacity = 1 << 22
)

// Sentinel errors, one per refusal reason, so callers can count them.
var (
	ErrShort       = errors.New("dd_otel_ctx: short buffer")
	ErrBadMagic    = errors.New("dd_otel_ctx: bad magic")
	ErrBadVersion  = errors.New("dd_otel_ctx: unsupported version")
	ErrBadSlotSize = errors.New("dd_otel_ctx: unsupported slot size")
	ErrBadCapacity = errors.New("dd_otel_ctx: capacity out of bounds")
	// ErrHeaderGone: the header's page was unmapped or discarded since the
	// buffer was found, or holds another header.
	ErrHeaderGone = errors.New("dd_otel_ctx: header page no longer written")
)

// Header is the decoded header (reserved bytes ignored).
type Header struct {
	Magic, Version, Capacity, SlotSize uint32
}

func (h Header) Size() uint64 { return BufferSize(h.Capacity) }

func BufferSize(capacity uint32) uint64 {
	return HeaderSize + SlotSize*uint64(capacity)
}

// ParseHeader validates a candidate's first IdentSize bytes; a capacity
// whose slots fit in mappingSize keeps every slot address inside the mapping.
func ParseHeader(b []byte, mappingSize uint64) (Header, error) {
	if len(b) < IdentSize {
		return Header{}, fmt.Errorf("%w: %d header bytes", ErrShort, len(b))
	}
	h := Header{
		Magic:    binary.NativeEndian.Uint32(b),
		Version:  binary.NativeEndian.Uint32(b[offVersion:]),
		Capacity: binary.NativeEndian.Uint32(b[offCapacity:]),
		SlotSize: binary.NativeEndian.Uint32(b[offSlotSize:]),
	}
	switch {
	case h.Magic != Magic:
		return h, fmt.Errorf("%w: %#x", ErrBadMagic, h.Magic)
	case h.Version != Version:
		return h, fmt.Errorf("%w: %d", ErrBadVersion, h.Version)
	case h.SlotSize != SlotSize:
		return h, fmt.Errorf("%w: %d", ErrBadSlotSize, h.SlotSize)
	case h.Capacity == 0 || h.Capacity > MaxCapacity:
		return h, fmt.Errorf("%w: %d slots (limit %d)", ErrBadCapacity, h.Capacity, MaxCapacity)
	case h.Size() > mappingSize:
		return h, fmt.Errorf("%w: %d slots need %d bytes, mapping has %d", ErrBadCapacity, h.Capacity, h.Size(), mappingSize)
	}
	return h, nil
}

type Buffer struct {
	Addr     uint64
	Capacity uint32
	// MappingName is "" when found by magic in an unnamed mapping.
	MappingName string
}

// SlotIndex takes the thread's TID in its own PID namespace, as the writer's
// gettid() returns it (internal/proc/pidns).
func (b Buffer) SlotIndex(tid int) uint32 {
	if b.Capacity == 0 {
		return 0
	}
	return uint32(uint64(tid) % uint64(b.Capacity))
}

func (b Buffer) SlotAddr(tid int) uint64 {
	return b.Addr + HeaderSize + SlotSize*uint64(b.SlotIndex(tid))
}

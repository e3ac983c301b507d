// Package ddotel reads the Datadog Java profiler's "otel" context storage
// (ctxstorage=otel, docs/dd-otel-ctx.md): one anonymous mapping
// holding a 32-byte header and a ring of 32-byte slots, one per thread at
// index tid % capacity, each with a 128-bit trace id, a span id and an
// in_use flag the writer raises while it rewrites the slot.
//
// This package only parses bytes; finding the mapping (discover.go) and
// reading slots of live threads (read.go) use internal/scan/remote.
package ddotel

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Layout (host byte order).
const (
	// Magic is "OTEL" read as a big-endian u32, stored as a host u32.
	Magic = 0x4F54454C
	// Version is the only header version this reader accepts.
	Version = 1
	// HeaderSize is the header; slot 0 starts right after it.
	HeaderSize = 32
	// SlotSize is sizeof(OtelContextSlot); a header announcing another
	// slot size is a layout this reader does not know.
	SlotSize = 32
	// OffInUse is the offset of the in_use byte in a slot.
	OffInUse = 24

	offVersion  = 4
	offCapacity = 8
	offSlotSize = 12
	// IdentSize is what discovery reads per candidate mapping: magic,
	// version, capacity and slot size (the reserved half carries nothing).
	IdentSize = 16

	// MaxCapacity bounds the slots a header may announce: 4Mi slots is a
	// 128 MiB mapping, 64 times the profiler's default (65536), and far
	// above any pid_max-sized ring (4Mi is Linux's PID_MAX_LIMIT). A larger
	// claim is refused rather than believed, so nothing sized from it (the
	// candidate filter, a slot address) can grow without bound.
	MaxCapacity = 1 << 22
)

// Sentinel errors: each is one reason a header or slot is refused, so
// callers can count refusals by reason (errors.Is).
var (
	// ErrShort: fewer bytes than the header or slot being parsed.
	ErrShort = errors.New("dd_otel_ctx: short buffer")
	// ErrBadMagic: the first word is not Magic (not this format at all).
	ErrBadMagic = errors.New("dd_otel_ctx: bad magic")
	// ErrBadVersion: the magic matches but the version is not Version.
	ErrBadVersion = errors.New("dd_otel_ctx: unsupported version")
	// ErrBadSlotSize: slot_size is not SlotSize.
	ErrBadSlotSize = errors.New("dd_otel_ctx: unsupported slot size")
	// ErrBadCapacity: capacity is 0, above MaxCapacity, or its slots do not
	// fit in the mapping.
	ErrBadCapacity = errors.New("dd_otel_ctx: capacity out of bounds")
)

// Header is the decoded header (the 16 reserved bytes are ignored).
type Header struct {
	Magic, Version, Capacity, SlotSize uint32
}

// Size is the number of bytes the header's slots need: 32 + 32*capacity.
func (h Header) Size() uint64 { return BufferSize(h.Capacity) }

// BufferSize is the size of a buffer with capacity slots.
func BufferSize(capacity uint32) uint64 {
	return HeaderSize + SlotSize*uint64(capacity)
}

// ParseHeader decodes and validates the first IdentSize bytes of a
// candidate mapping of mappingSize bytes: magic, version, slot size, and a
// capacity in 1..MaxCapacity whose slots fit in the mapping (so every slot
// address computed from it lies inside the mapping).
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

// Buffer is where a validated buffer lives in a process.
type Buffer struct {
	// Addr is the address of the header in the target process.
	Addr uint64
	// Capacity is the validated slot count.
	Capacity uint32
	// MappingName is the mapping's name in /proc/PID/maps ("" when found by
	// magic in an unnamed anonymous mapping).
	MappingName string
}

// SlotIndex is the slot of thread tid: tid % capacity, as the writer
// computes it (OS::threadId() is a positive pid_t). tid is the thread's TID
// in its process's PID namespace (syscall(__NR_gettid) in the writer), not
// the one /proc/PID/task lists in another namespace: see NSTIDs.
func (b Buffer) SlotIndex(tid int) uint32 {
	if b.Capacity == 0 {
		return 0
	}
	return uint32(uint64(tid) % uint64(b.Capacity))
}

// SlotAddr is the address of thread tid's slot (tid as in SlotIndex).
func (b Buffer) SlotAddr(tid int) uint64 {
	return b.Addr + HeaderSize + SlotSize*uint64(b.SlotIndex(tid))
}

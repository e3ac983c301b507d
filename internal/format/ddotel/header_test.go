// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddotel_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/otelctx/otelctx/internal/format/ddotel"
)

// header builds the first 16 bytes of a buffer.
func header(magic, version, capacity, slotSize uint32) []byte {
	b := make([]byte, ddotel.HeaderSize)
	binary.NativeEndian.PutUint32(b, magic)
	binary.NativeEndian.PutUint32(b[4:], version)
	binary.NativeEndian.PutUint32(b[8:], capacity)
	binary.NativeEndian.PutUint32(b[12:], slotSize)
	return b
}

func TestParseHeader(t *testing.T) {
	const page = 4096
	def := ddotel.BufferSize(65536) // the profiler's default: 2 MiB + 32
	for _, tc := range []struct {
		name    string
		b       []byte
		mapping uint64
		want    error
	}{
		{"default", header(ddotel.Magic, 1, 65536, 32), def + page - 32, nil},
		{"exact_fit", header(ddotel.Magic, 1, 127, 32), page, nil},
		{"one_slot_too_many", header(ddotel.Magic, 1, 128, 32), page, ddotel.ErrBadCapacity},
		{"zero_capacity", header(ddotel.Magic, 1, 0, 32), page, ddotel.ErrBadCapacity},
		{"huge_capacity", header(ddotel.Magic, 1, 0xffffffff, 32), 1 << 40, ddotel.ErrBadCapacity},
		{"above_max", header(ddotel.Magic, 1, ddotel.MaxCapacity+1, 32), 1 << 40, ddotel.ErrBadCapacity},
		{"at_max", header(ddotel.Magic, 1, ddotel.MaxCapacity, 32), ddotel.BufferSize(ddotel.MaxCapacity), nil},
		{"bad_version", header(ddotel.Magic, 2, 16, 32), page, ddotel.ErrBadVersion},
		{"bad_slot_size", header(ddotel.Magic, 1, 16, 64), page, ddotel.ErrBadSlotSize},
		{"bad_magic", header(0x4C45544F, 1, 16, 32), page, ddotel.ErrBadMagic},
		{"zero_page", make([]byte, 32), page, ddotel.ErrBadMagic},
		{"short", header(ddotel.Magic, 1, 16, 32)[:15], page, ddotel.ErrShort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ddotel.ParseHeader(tc.b, tc.mapping)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("ParseHeader = %+v, %v; want %v", h, err, tc.want)
			}
			if err == nil && (h.Magic != ddotel.Magic || h.Size() > tc.mapping) {
				t.Fatalf("accepted %+v for a %d-byte mapping", h, tc.mapping)
			}
		})
	}
}

func TestSlotAddr(t *testing.T) {
	b := ddotel.Buffer{Addr: 0x7f0000000000, Capacity: 16}
	for tid, want := range map[int]uint64{
		0:   0x7f0000000020,
		1:   0x7f0000000040,
		15:  0x7f0000000020 + 15*32,
		16:  0x7f0000000020,
		100: 0x7f0000000020 + 4*32,
	} {
		if got := b.SlotAddr(tid); got != want {
			t.Errorf("SlotAddr(%d) = %#x, want %#x", tid, got, want)
		}
	}
	// Every slot of the largest accepted buffer lies inside it.
	big := ddotel.Buffer{Addr: 1 << 40, Capacity: ddotel.MaxCapacity}
	if end := big.SlotAddr(ddotel.MaxCapacity-1) + ddotel.SlotSize; end != big.Addr+ddotel.BufferSize(ddotel.MaxCapacity) {
		t.Errorf("last slot ends at %#x", end)
	}
}

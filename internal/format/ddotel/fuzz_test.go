// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddotel_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/testutil/fuzzcorpus"
)

// FuzzParseHeader: any bytes and mapping size give a header whose slots
// all lie inside the mapping, or exactly one reason for refusing it.
func FuzzParseHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte, mappingSize uint64) {
		h, err := ddotel.ParseHeader(b, mappingSize)
		if err != nil {
			n := 0
			for _, e := range []error{ddotel.ErrShort, ddotel.ErrBadMagic, ddotel.ErrBadVersion, ddotel.ErrBadSlotSize, ddotel.ErrBadCapacity} {
				if errors.Is(err, e) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("error %v matches %d reasons, want exactly one", err, n)
			}
			return
		}
		if len(b) < ddotel.IdentSize || binary.NativeEndian.Uint32(b) != ddotel.Magic || h.Version != ddotel.Version || h.SlotSize != ddotel.SlotSize {
			t.Fatalf("accepted % x as %+v", b, h)
		}
		if h.Capacity == 0 || h.Capacity > ddotel.MaxCapacity || h.Size() > mappingSize {
			t.Fatalf("accepted %+v for a %d-byte mapping", h, mappingSize)
		}
		buf := ddotel.Buffer{Addr: 1 << 40, Capacity: h.Capacity}
		for _, tid := range []int{0, 1, int(h.Capacity) - 1, int(h.Capacity), 4194304, 1<<31 - 1} {
			// Offsets, not end addresses: a huge mapping size must not wrap.
			if off := buf.SlotAddr(tid) - buf.Addr; off < ddotel.HeaderSize || off+ddotel.SlotSize > mappingSize {
				t.Fatalf("tid %d: slot at offset %#x outside a %d-byte mapping", tid, off, mappingSize)
			}
		}
	})
}

// FuzzConsistent: a pair of slot reads is accepted only when in_use is 0
// in both and their fields are equal; the record then carries the fields
// big-endian, high half first.
func FuzzConsistent(f *testing.F) {
	f.Fuzz(func(t *testing.T, first, second []byte) {
		s, err := ddotel.Consistent(first, second)
		if err != nil {
			if !errors.Is(err, ddotel.ErrShort) && !errors.Is(err, ddotel.ErrInProgress) && !errors.Is(err, ddotel.ErrTorn) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if len(first) < ddotel.SlotSize || len(second) < ddotel.SlotSize || first[ddotel.OffInUse] != 0 || second[ddotel.OffInUse] != 0 ||
			!bytes.Equal(first[:ddotel.OffInUse], second[:ddotel.OffInUse]) {
			t.Fatalf("accepted % x / % x", first, second)
		}
		r := s.Record()
		if s.IsZero() {
			if !r.TraceID.IsZero() || !r.SpanID.IsZero() {
				t.Fatalf("zero slot %+v gave %+v", s, r)
			}
			return
		}
		var want [24]byte
		binary.BigEndian.PutUint64(want[:], binary.NativeEndian.Uint64(first))
		binary.BigEndian.PutUint64(want[8:], binary.NativeEndian.Uint64(first[8:]))
		binary.BigEndian.PutUint64(want[16:], binary.NativeEndian.Uint64(first[16:]))
		if !bytes.Equal(r.TraceID[:], want[:16]) || !bytes.Equal(r.SpanID[:], want[16:]) {
			t.Fatalf("slot % x gave %s %s", first[:24], r.TraceID, r.SpanID)
		}
	})
}

// seedCorpus is the committed corpus of the fuzz targets (testdata/fuzz).
func seedCorpus() fuzzcorpus.Seeds {
	page := uint64(4096)
	return fuzzcorpus.Seeds{
		"FuzzParseHeader": {
			"default":        {header(ddotel.Magic, 1, 65536, 32), ddotel.BufferSize(65536) + page - 32},
			"exact_fit":      {header(ddotel.Magic, 1, 127, 32), page},
			"beyond_mapping": {header(ddotel.Magic, 1, 128, 32), page},
			"huge_capacity":  {header(ddotel.Magic, 1, 0xffffffff, 32), ^uint64(0)},
			"zero_capacity":  {header(ddotel.Magic, 1, 0, 32), page},
			"bad_version":    {header(ddotel.Magic, 2, 16, 32), page},
			"slot_size_64":   {header(ddotel.Magic, 1, 16, 64), page},
			"byte_swapped":   {header(0x4C45544F, 1, 16, 32), page},
			"short":          {header(ddotel.Magic, 1, 16, 32)[:15], page},
		},
		"FuzzConsistent": {
			"stable":         {slot(0, 0xabc, 0x123, 0), slot(0, 0xabc, 0x123, 0)},
			"in_progress":    {slot(0, 0xabc, 0x123, 1), slot(0, 0xabc, 0x123, 0)},
			"changed":        {slot(0, 0xabc, 0x123, 0), slot(0, 0xabc, 0x124, 0)},
			"zero":           {slot(0, 0, 0, 0), slot(0, 0, 0, 0)},
			"half_context":   {slot(0, 0xabc, 0, 0), slot(0, 0xabc, 0, 0)},
			"full_128":       {slot(0x0102030405060708, 0x090a0b0c0d0e0f10, 0x1112131415161718, 0), slot(0x0102030405060708, 0x090a0b0c0d0e0f10, 0x1112131415161718, 0)},
			"in_use_garbage": {slot(1, 2, 3, 0x80), slot(1, 2, 3, 0x80)},
			"short":          {slot(1, 2, 3, 0)[:31], slot(1, 2, 3, 0)},
		},
	}
}

// TestSeedCorpus keeps testdata/fuzz in step with seedCorpus (rewrite it
// with go test -run TestSeedCorpus -update-corpus).
func TestSeedCorpus(t *testing.T) {
	fuzzcorpus.Check(t, "./internal/format/ddotel", seedCorpus())
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// sampleEvent lays out a struct sample_event as on_tick writes it.
func sampleEvent(pid, tid uint32, boot uint64, flags, n uint16, slotTID uint32, data []byte) []byte {
	b := make([]byte, eventHeaderSize, eventHeaderSize+len(data))
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], pid)
	ne.PutUint32(b[4:], tid)
	ne.PutUint64(b[8:], boot)
	ne.PutUint16(b[16:], flags)
	ne.PutUint16(b[18:], n)
	ne.PutUint32(b[20:], slotTID)
	return append(b, data...)
}

// The ring buffer's records carry bytes copied from publishers' memory
// (records, DD slots) behind a header the BPF program writes: whatever the
// bytes, decoding never panics, never reads past the record and never keeps
// a reference into the reader's buffer.
func FuzzDecodeSample(f *testing.F) {
	record := make([]byte, 28+8)
	record[26] = 1 // valid
	f.Add(sampleEvent(10, 11, 1e9, 0, uint16(len(record)), 0, record))
	f.Add(sampleEvent(10, 11, 1e9, flagDD|flagFollowed, ddFieldsSize, 12, make([]byte, ddFieldsSize)))
	f.Add(sampleEvent(10, 11, 1e9, flagDD, ddFieldsSize+1, 12, make([]byte, ddFieldsSize+1)))
	f.Add(sampleEvent(10, 11, ^uint64(0), flagNull|flagOffCPU, 0, 0, nil))
	f.Add(sampleEvent(^uint32(0), ^uint32(0), 0, 0xffff, 0xffff, 0, []byte{1, 2, 3}))
	f.Add([]byte{1, 2, 3})
	s := &Sampler{}
	f.Fuzz(func(t *testing.T, b []byte) {
		orig := bytes.Clone(b)
		it, ok := s.decodeSample(b)
		if !ok {
			return
		}
		smp := it.sample
		if len(b) < eventHeaderSize || len(smp.Record) > len(b)-eventHeaderSize {
			t.Fatalf("decoded %d record bytes from a %d-byte event", len(smp.Record), len(b))
		}
		if smp.Read == ReadBufferSlot && smp.Record != nil {
			t.Fatalf("a buffer slot sample carries a record")
		}
		for i := range b {
			b[i] ^= 0xff // the reader reuses its buffer
		}
		if len(smp.Record) > 0 && !bytes.Equal(smp.Record, orig[eventHeaderSize:eventHeaderSize+len(smp.Record)]) {
			t.Fatalf("the record aliases the reader's buffer")
		}
		if _, ok := decodePrctl(orig); ok && len(orig) < 16 {
			t.Fatalf("a %d-byte prctl event decoded", len(orig))
		}
	})
}

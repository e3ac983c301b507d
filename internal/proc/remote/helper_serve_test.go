// SPDX-License-Identifier: Apache-2.0

//go:build linux

package remote

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// encodeRanges encodes a request of ranges (addr, len) as the collector would,
// with each set.
func encodeRanges(each bool, ranges ...[2]uint64) []byte {
	var b []byte
	b = binary.NativeEndian.AppendUint32(b, uint32(requestHeader-4+len(ranges)*rangeSize))
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = binary.NativeEndian.AppendUint32(b, 1)
	e := uint32(0)
	if each {
		e = 1
	}
	b = binary.NativeEndian.AppendUint32(b, e)
	b = binary.NativeEndian.AppendUint32(b, uint32(len(ranges)))
	for _, r := range ranges {
		b = binary.NativeEndian.AppendUint64(b, r[0])
		b = binary.NativeEndian.AppendUint64(b, r[1])
	}
	return b
}

// TestReadRequestBounds: lengths whose sum wraps around, a total over
// maxRequestBytes, and a ReadAt of several ranges are refused before the
// helper allocates anything.
func TestReadRequestBounds(t *testing.T) {
	for name, b := range map[string][]byte{
		"sum wraps":     encodeRanges(true, [2]uint64{0x1000, 16}, [2]uint64{0x2000, 1<<64 - 8}),
		"over the cap":  encodeRanges(true, [2]uint64{0x1000, maxRequestBytes}, [2]uint64{0x2000, 1}),
		"readat of two": encodeRanges(false, [2]uint64{0x1000, 8}, [2]uint64{0x2000, 8}),
	} {
		if _, err := readRequest(bufio.NewReader(bytes.NewReader(b))); !errors.Is(err, errBadRequest) {
			t.Errorf("%s: %v, want errBadRequest", name, err)
		}
	}
	r, err := readRequest(bufio.NewReader(bytes.NewReader(encodeRanges(true, [2]uint64{0x1000, 8}, [2]uint64{0x2000, 0}))))
	if err != nil || len(r.addrs) != 2 || r.lens[0] != 8 || !r.each {
		t.Errorf("a good request: %+v, %v", r, err)
	}
}

// FuzzReadRequest: whatever bytes arrive, readRequest returns a request
// within the bounds or an error, and serving one never panics (its reads
// are of an address nobody maps, in a PID that is this process).
func FuzzReadRequest(f *testing.F) {
	f.Add(encodeRanges(true, [2]uint64{0x1000, 16}, [2]uint64{0x2000, 1<<64 - 8}))
	f.Add(encodeRanges(false, [2]uint64{0x1000, 8}))
	f.Add(encodeRanges(true))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := readRequest(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		var total uint64
		for _, l := range r.lens {
			total += l
		}
		if total > maxRequestBytes || len(r.addrs) > maxRequestRanges || (!r.each && len(r.addrs) != 1) {
			t.Fatalf("request past the bounds: %d ranges, %d bytes, each %v", len(r.addrs), total, r.each)
		}
		r.pid = 0 // no process: the system call fails at once
		reply := r.serve()
		if len(reply) < replyHeader || int(binary.NativeEndian.Uint32(reply))+4 != len(reply) {
			t.Fatalf("reply of %d bytes says %d", len(reply), binary.NativeEndian.Uint32(reply))
		}
	})
}

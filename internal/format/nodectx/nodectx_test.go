// SPDX-License-Identifier: Apache-2.0

package nodectx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// heap is a sparse fake address space of 8-byte words.
type heap map[uint64]uint64

func (h heap) ReadAt(p []byte, addr uint64) error {
	for i := 0; i < len(p); i += 8 {
		v, ok := h[addr+uint64(i)]
		if !ok {
			return fmt.Errorf("unmapped %#x", addr+uint64(i))
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		copy(p[i:], b[:])
	}
	return nil
}

func smiOf(n int64) uint64 { return uint64(n) << smiShift }

// The addresses of a well-formed process (tagged ones end in 1).
const (
	slot      = 0x7f0000001000
	cped      = 0x7f0000002000
	handle    = 0x7f0000003000
	undef     = 0x100000000011
	frame     = 0x200000000001
	table     = 0x300000000001
	alsKey    = 0x400000000001
	otherKey  = 0x500000000001
	store     = 0x600000000001
	wrapper   = 0x7f0000004000
	record    = 0x7f0000005000
	buckets   = 4
	alsHash   = 0x13acd6 // bucket 2
	otherHash = 0x13acd2 // bucket 2 too: a chain
)

// world: the frame's table holds the other storage at entry 0 and ours at
// entry 1, chained from bucket 2 (entry 1 -> entry 0).
func world(l Layout) heap {
	h := heap{
		slot: cped, slot + 8: handle, slot + 16: alsHash, slot + 24: undef,
		cped: frame, handle: alsKey,
		frame - 1 + l.JSMapTableOffset: table,
	}
	base := uint64(table) - 1 + l.OrderedHashMapHeaderSize
	h[base], h[base+8], h[base+16] = smiOf(2), smiOf(0), smiOf(buckets)
	for b := range uint64(buckets) {
		h[base+24+b*8] = smiOf(notFound)
	}
	h[base+24+2*8] = smiOf(1)
	entries := base + 24 + buckets*8
	h[entries], h[entries+8], h[entries+16] = otherKey, undef, smiOf(notFound)
	h[entries+24], h[entries+32], h[entries+40] = alsKey, store, smiOf(0)
	if l.Direct {
		h[store-1+l.WrappedObjectOffset] = record
	} else {
		h[store-1+l.WrappedObjectOffset] = wrapper
		h[wrapper+l.NativeWrapFieldsOffset] = record
	}
	return h
}

var direct = func() Layout { l, _ := ForModule(nil, "/x/dd_pprof.node.abi137.node"); return l }()

func TestRecordAddr(t *testing.T) {
	published, err := ForModule(publishedLayout(map[string]int64{KeyWrappedObjectOffset: 24, KeyNativeWrapFieldsOffset: 8}), "dd_pprof.node")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []Layout{direct, published} {
		got, err := RecordAddr(world(l), l, slot)
		if err != nil || got != record {
			t.Errorf("direct=%v: %#x, %v; want %#x", l.Direct, got, err, uint64(record))
		}
	}
}

func TestRecordAddrReasons(t *testing.T) {
	l := direct
	entries := uint64(table) - 1 + l.OrderedHashMapHeaderSize + 24 + buckets*8
	for _, tc := range []struct {
		name   string
		change func(h heap)
		reason string
	}{
		{"unset variable", func(h heap) { h[slot] = 0 }, ReasonNotRegistered},
		{"undefined frame", func(h heap) { h[cped] = undef }, ReasonNoFrame},
		{"undefined store", func(h heap) { h[entries+32] = undef }, ReasonNoStore},
		{"key not in frame", func(h heap) { h[entries+24] = otherKey + 0x100 }, ReasonNoStore},
		{"frame is a Smi", func(h heap) { h[cped] = smiOf(5) }, ReasonBadPointer},
		{"key not tagged", func(h heap) { h[handle] = 0x400000000000 }, ReasonBadPointer},
		{"misaligned cped slot", func(h heap) { h[slot] = cped + 4 }, ReasonBadPointer},
		{"store not tagged", func(h heap) { h[entries+32] = 0x600000000008 }, ReasonBadPointer},
		{"null record", func(h heap) { h[store-1+l.WrappedObjectOffset] = 0 }, ReasonBadPointer},
		{"buckets not a power of 2", func(h heap) { h[table-1+l.OrderedHashMapHeaderSize+16] = smiOf(3) }, ReasonBadTable},
		{"count not a Smi", func(h heap) { h[table-1+l.OrderedHashMapHeaderSize] = 7 }, ReasonBadTable},
		{"too many elements", func(h heap) { h[table-1+l.OrderedHashMapHeaderSize] = smiOf(9) }, ReasonBadTable},
		{"entry out of range", func(h heap) { h[entries-buckets*8+2*8] = smiOf(5) }, ReasonBadTable},
		{"chain loops", func(h heap) {
			h[entries+24] = otherKey + 0x100
			h[entries+40] = smiOf(1)
		}, ReasonLongChain},
		{"table unmapped", func(h heap) { h[frame-1+l.JSMapTableOffset] = 0x900000000001 }, ReasonRead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := world(l)
			tc.change(h)
			got, err := RecordAddr(h, l, slot)
			if ReasonOf(err) != tc.reason {
				t.Fatalf("%#x, %v: reason %q, want %q", got, err, ReasonOf(err), tc.reason)
			}
			var e *Error
			if !errors.As(err, &e) || e.Error() == "" {
				t.Errorf("error %v", err)
			}
		})
	}
}

func TestForModule(t *testing.T) {
	for _, tc := range []struct {
		module string
		ints   map[string]int64
		want   uint64
		err    bool
	}{
		{"/a/prebuilds/linux-x64/dd_pprof.node.abi127.node", nil, 24, false},
		{"/a/prebuilds/linux-arm64/dd_pprof.musl.node.abi147.node", nil, 32, false},
		{"/a/build/Release/dd_pprof.node", nil, 0, true},
		{"/a/dd_pprof.node.abi115.node", nil, 0, true}, // Node 20
		{"/a/dd_pprof.node", publishedLayout(nil), 40, false},
		{"/a/dd_pprof.node", map[string]int64{KeyWrappedObjectOffset: 40}, 0, true}, // partial: the rest would be defaults
		{"/a/dd_pprof.node", publishedLayout(map[string]int64{KeyTaggedSize: 4}), 0, true},
		{"/a/dd_pprof.node", publishedLayout(map[string]int64{KeyJSMapTableOffset: 5}), 0, true},
		{"/a/dd_pprof.node", publishedLayout(map[string]int64{KeyJSMapTableOffset: 1 << 20}), 0, true},
		{"/a/dd_pprof.node", publishedLayout(map[string]int64{KeyNativeWrapFieldsOffset: maxOffset}), 0, true},
	} {
		l, err := ForModule(tc.ints, tc.module)
		if (err != nil) != tc.err || (err == nil && l.WrappedObjectOffset != tc.want) {
			t.Errorf("%s %v: %+v, %v", tc.module, tc.ints, l, err)
		}
		if err != nil && !errors.Is(err, ErrLayout) {
			t.Errorf("%s: %v is not ErrLayout", tc.module, err)
		}
	}
}

// publishedLayout is a complete published layout (wrapped object at 40),
// with over's values instead.
func publishedLayout(over map[string]int64) map[string]int64 {
	ints := map[string]int64{KeyTaggedSize: 8, KeyJSMapTableOffset: 0x18, KeyOrderedHashMapHeaderSize: 0x10, KeyWrappedObjectOffset: 40, KeyNativeWrapFieldsOffset: 16}
	for k, v := range over {
		ints[k] = v
	}
	return ints
}

// FuzzRecordAddr: any bytes as the process's memory: a bounded walk that
// ends with an address or a reason, never a panic or a hang.
func FuzzRecordAddr(f *testing.F) {
	f.Add(make([]byte, 64))
	seed := make([]byte, 512)
	binary.LittleEndian.PutUint64(seed[0:], fuzzBase+64)
	binary.LittleEndian.PutUint64(seed[8:], fuzzBase+72)
	binary.LittleEndian.PutUint64(seed[24:], fuzzBase+0x1f1)
	binary.LittleEndian.PutUint64(seed[64:], fuzzBase+0x81)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		mem := flat(b)
		addr, err := RecordAddr(mem, direct, fuzzBase)
		if err == nil && addr == 0 {
			t.Fatal("no error and no address")
		}
		if err != nil && ReasonOf(err) == "" {
			t.Fatalf("error without a reason: %v", err)
		}
	})
}

const fuzzBase = 0x10000

// flat maps b at fuzzBase.
type flat []byte

func (f flat) ReadAt(p []byte, addr uint64) error {
	if addr < fuzzBase || addr-fuzzBase > uint64(len(f)) || uint64(len(f))-(addr-fuzzBase) < uint64(len(p)) {
		return errors.New("unmapped")
	}
	copy(p, f[addr-fuzzBase:])
	return nil
}

// TestFlatSeed: the committed seed walk_to_record reaches its record.
func TestFlatSeed(t *testing.T) {
	b, err := os.ReadFile("testdata/fuzz/FuzzRecordAddr/walk_to_record")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(b), "\n", 3)
	raw, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := RecordAddr(flat(raw), direct, fuzzBase)
	if err != nil || got != fuzzBase+0x300 {
		t.Fatalf("%#x, %v", got, err)
	}
}

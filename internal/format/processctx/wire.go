// SPDX-License-Identifier: Apache-2.0

package processctx

import (
	"fmt"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/otelctx/otelctx/internal/utf8safe"
)

// str copies b into a string, its invalid UTF-8 replaced (utf8safe), truncated
// to MaxValueLength at a UTF-8 boundary.
func (d *decoder) str(b []byte) string {
	if clean, replaced := utf8safe.Bytes(b); replaced {
		d.stats.InvalidUTF8++
		d.charge(len(clean))
		b = clean
	}
	if len(b) > d.lim.MaxValueLength {
		d.stats.TruncatedValues++
		n := d.lim.MaxValueLength
		for n > 0 && !utf8.RuneStart(b[n]) {
			n--
		}
		b = b[:n]
	}
	return d.intern(b)
}

// arenaChunk: a retained string keeps at most this much alive.
const arenaChunk = 4 << 10

// intern: a context's strings are most of its allocations, so they share an
// arena; its bytes are never written again once referenced.
func (d *decoder) intern(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > arenaChunk {
		d.charge(len(b))
		return string(b)
	}
	if cap(d.arena)-len(d.arena) < len(b) {
		n := min(max(d.remaining, len(b)), arenaChunk)
		d.charge(n)
		d.arena = make([]byte, 0, n)
	}
	start := len(d.arena)
	d.arena = append(d.arena, b...)
	d.remaining -= len(b)
	return unsafe.String(&d.arena[start], len(b))
}

func (d *decoder) bytes(b []byte) []byte {
	if len(b) > d.lim.MaxValueLength {
		d.stats.TruncatedValues++
		b = b[:d.lim.MaxValueLength]
	}
	// Non-nil even when empty: an empty bytes value is not an absent one.
	d.charge(len(b))
	return append(make([]byte, 0, len(b)), b...)
}

// countFields sizes lists before decoding (an estimate: duplicates count; walk
// reports a malformed tail).
func countFields(b []byte, num protowire.Number) int {
	n := 0
	for len(b) > 0 {
		f, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			break
		}
		b = b[l:]
		if l = protowire.ConsumeFieldValue(f, typ, b); l < 0 {
			break
		}
		b = b[l:]
		if f == num {
			n++
		}
	}
	return n
}

// walk passes the bytes of length-delimited fields, else the value.
func walk(b []byte, fn func(num protowire.Number, typ protowire.Type, b []byte, v uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var (
			val  []byte
			x    uint64
			used int
		)
		switch typ {
		case protowire.VarintType:
			x, used = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			x, used = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var y uint32
			y, used = protowire.ConsumeFixed32(b)
			x = uint64(y)
		case protowire.BytesType:
			val, used = protowire.ConsumeBytes(b)
		default:
			// Groups (deprecated) and invalid types: skip with the library's
			// own bounds checks.
			used = protowire.ConsumeFieldValue(num, typ, b)
		}
		if used < 0 {
			return protowire.ParseError(used)
		}
		b = b[used:]
		if err := fn(num, typ, val, x); err != nil {
			return err
		}
	}
	return nil
}

func errWireType(field string, typ protowire.Type) error {
	return fmt.Errorf("%s: unexpected wire type %d", field, typ)
}

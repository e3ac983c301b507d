// SPDX-License-Identifier: Apache-2.0

package threadctx_test

import (
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/format/threadctx"
)

// record builds a record: header with the given fields, then attrs (raw
// entry bytes); size overrides attrs_data_size when >= 0.
func record(valid, flags byte, size int, attrs ...[]byte) []byte {
	b := make([]byte, threadctx.HeaderSize)
	for i := 0; i < 16; i++ {
		b[i] = byte(0x10 + i) // trace id 101112…1f
	}
	for i := 0; i < 8; i++ {
		b[16+i] = byte(0xa0 + i) // span id a0a1…a7
	}
	b[24], b[25] = valid, flags
	var data []byte
	for _, a := range attrs {
		data = append(data, a...)
	}
	if size < 0 {
		size = len(data)
	}
	binary.NativeEndian.PutUint16(b[26:], uint16(size))
	return append(b, data...)
}

func entry(key byte, v string) []byte { return append([]byte{key, byte(len(v))}, v...) }

func TestParse(t *testing.T) {
	r, err := threadctx.Parse(record(1, 1, -1, entry(0, "/users/:id"), entry(1, "GET")))
	if err != nil {
		t.Fatal(err)
	}
	if r.TraceID.String() != "101112131415161718191a1b1c1d1e1f" || r.SpanID.String() != "a0a1a2a3a4a5a6a7" || r.TraceFlags != 1 {
		t.Fatalf("ids/flags: %s %s %d", r.TraceID, r.SpanID, r.TraceFlags)
	}
	want := []threadctx.Attr{{KeyIndex: 0, Value: "/users/:id"}, {KeyIndex: 1, Value: "GET"}}
	if !reflect.DeepEqual(r.Attrs, want) || r.Truncated {
		t.Fatalf("attrs %+v truncated=%v", r.Attrs, r.Truncated)
	}
}

func TestParseRejects(t *testing.T) {
	for _, valid := range []byte{0, 2, 0xff} {
		if _, err := threadctx.Parse(record(valid, 0, -1)); !errors.Is(err, threadctx.ErrInvalid) {
			t.Errorf("valid=%d: got %v, want ErrInvalid", valid, err)
		}
	}
	if _, err := threadctx.Parse(make([]byte, threadctx.HeaderSize-1)); !errors.Is(err, threadctx.ErrShort) {
		t.Errorf("27 bytes: got %v, want ErrShort", err)
	}
}

func TestLastOccurrenceWins(t *testing.T) {
	r, err := threadctx.Parse(record(1, 0, -1, entry(3, "a"), entry(1, "x"), entry(3, "b")))
	if err != nil {
		t.Fatal(err)
	}
	want := []threadctx.Attr{{KeyIndex: 3, Value: "b"}, {KeyIndex: 1, Value: "x"}}
	if !reflect.DeepEqual(r.Attrs, want) {
		t.Fatalf("got %+v, want %+v", r.Attrs, want)
	}
}

func TestStopsAtIncompleteEntry(t *testing.T) {
	for name, tc := range map[string]struct {
		b    []byte
		want []threadctx.Attr
	}{
		// A value claiming 10 bytes with 3 left: ignored, earlier entries kept.
		"short value": {record(1, 0, -1, entry(0, "ok"), []byte{1, 10, 'a', 'b', 'c'}), []threadctx.Attr{{0, "ok"}}},
		// A lone key byte cannot hold an entry.
		"lone key": {record(1, 0, -1, entry(0, "ok"), []byte{7}), []threadctx.Attr{{0, "ok"}}},
		// attrs_data_size ends mid-entry: bytes past it are not attrs.
		"size cuts entry": {record(1, 0, 4+2, entry(0, "ok"), entry(1, "zz")), []threadctx.Attr{{0, "ok"}}},
	} {
		r, err := threadctx.Parse(tc.b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(r.Attrs, tc.want) || !r.Truncated {
			t.Errorf("%s: attrs %+v truncated=%v, want %+v truncated", name, r.Attrs, r.Truncated, tc.want)
		}
	}
}

// attrs_data_size beyond what was read (the read cap): parse what is there.
func TestReadCap(t *testing.T) {
	full := record(1, 0, -1, entry(0, strings.Repeat("r", 200)), entry(1, strings.Repeat("m", 200)), entry(2, "last"))
	capped := full[:threadctx.DefaultReadCap/2]
	r, err := threadctx.Parse(capped)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Attrs) != 1 || r.Attrs[0].KeyIndex != 0 || !r.Truncated {
		t.Fatalf("got %+v truncated=%v", r.Attrs, r.Truncated)
	}
	if got := threadctx.AttrsDataSize(full); got != len(full)-threadctx.HeaderSize {
		t.Fatalf("AttrsDataSize = %d", got)
	}
	// Trailing bytes after attrs_data_size are not parsed.
	r, _ = threadctx.Parse(append(record(1, 0, -1, entry(0, "a")), entry(1, "junk")...))
	if len(r.Attrs) != 1 || r.Truncated {
		t.Fatalf("trailing bytes parsed: %+v", r.Attrs)
	}
}

func TestNamed(t *testing.T) {
	r, _ := threadctx.Parse(record(1, 0, -1, entry(0, "/a"), entry(1, "GET"), entry(9, "?")))
	named, unknown := r.Named([]string{"http.route", "http.request.method"})
	if !reflect.DeepEqual(named, map[string]string{"http.route": "/a", "http.request.method": "GET"}) {
		t.Fatalf("named %v", named)
	}
	if !reflect.DeepEqual(unknown, []uint8{9}) {
		t.Fatalf("unknown %v", unknown)
	}
}

// TestInvalidUTF8Replaced: a value with invalid UTF-8 reaches the record
// with U+FFFD in its place, and is counted.
func TestInvalidUTF8Replaced(t *testing.T) {
	r, err := threadctx.Parse(record(1, 0, -1, entry(0, "ok\xff\xfe"), entry(1, "GET"), entry(2, "\xc3")))
	if err != nil {
		t.Fatal(err)
	}
	want := []threadctx.Attr{{KeyIndex: 0, Value: "ok\uFFFD"}, {KeyIndex: 1, Value: "GET"}, {KeyIndex: 2, Value: "\uFFFD"}}
	if !slices.Equal(r.Attrs, want) || r.InvalidUTF8 != 2 {
		t.Fatalf("attrs %q, InvalidUTF8 %d; want %q, 2", r.Attrs, r.InvalidUTF8, want)
	}
}

// SPDX-License-Identifier: Apache-2.0

package processctx_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/otelctx/otelctx/internal/format/processctx"
)

// header builds a 32-byte header in host byte order.
func header(sig string, version, size uint32, stamp, payload uint64) []byte {
	b := make([]byte, processctx.HeaderSize)
	copy(b, sig)
	binary.NativeEndian.PutUint32(b[8:], version)
	binary.NativeEndian.PutUint32(b[12:], size)
	binary.NativeEndian.PutUint64(b[16:], stamp)
	binary.NativeEndian.PutUint64(b[24:], payload)
	return b
}

func TestParseHeader(t *testing.T) {
	const limit = processctx.DefaultMaxPayloadSize
	valid := header("OTEL_CTX", 2, 300, 1234567, 0x7f0000001000)
	h, err := processctx.ParseHeader(valid, limit)
	if err != nil {
		t.Fatalf("valid header: %v", err)
	}
	want := processctx.Header{Version: 2, PayloadSize: 300, PublishedAtNs: 1234567, PayloadAddr: 0x7f0000001000}
	if h != want {
		t.Fatalf("ParseHeader = %+v, want %+v", h, want)
	}
	// Only the first 32 bytes count.
	if h2, err := processctx.ParseHeader(append(valid, 0xff, 0xff), limit); err != nil || h2 != want {
		t.Fatalf("header with trailing bytes: %+v, %v", h2, err)
	}
	// The bounds are inclusive of the limit.
	if _, err := processctx.ParseHeader(header("OTEL_CTX", 2, limit, 1, 1), limit); err != nil {
		t.Fatalf("payload_size == limit: %v", err)
	}
	if _, err := processctx.ParseHeader(header("OTEL_CTX", 2, 1, 1, 1), limit); err != nil {
		t.Fatalf("payload_size 1: %v", err)
	}

	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"short", valid[:31], processctx.ErrInvalidContext},
		{"empty", nil, processctx.ErrInvalidContext},
		{"zero signature", header("\x00\x00\x00\x00\x00\x00\x00\x00", 2, 300, 1, 1), processctx.ErrInvalidContext},
		{"wrong signature", header("OTEL_CTY", 2, 300, 1, 1), processctx.ErrInvalidContext},
		{"lower-case signature", header("otel_ctx", 2, 300, 1, 1), processctx.ErrInvalidContext},
		{"version 0", header("OTEL_CTX", 0, 300, 1, 1), processctx.ErrInvalidContext},
		{"version 1 (development)", header("OTEL_CTX", 1, 300, 1, 1), processctx.ErrInvalidContext},
		{"version 3", header("OTEL_CTX", 3, 300, 1, 1), processctx.ErrInvalidContext},
		{"version big-endian 2", header("OTEL_CTX", 2<<24, 300, 1, 1), processctx.ErrInvalidContext},
		{"stamp 0 (update in progress)", header("OTEL_CTX", 2, 300, 0, 1), processctx.ErrUpdateInProgress},
		{"payload_size 0", header("OTEL_CTX", 2, 0, 1, 1), processctx.ErrPayloadSize},
		{"payload_size limit+1", header("OTEL_CTX", 2, limit+1, 1, 1), processctx.ErrPayloadSize},
		{"payload_size 100000000", header("OTEL_CTX", 2, 100000000, 1, 1), processctx.ErrPayloadSize},
		{"payload_size max", header("OTEL_CTX", 2, ^uint32(0), 1, 1), processctx.ErrPayloadSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := processctx.ParseHeader(tc.b, limit)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ParseHeader: %v, want %v", err, tc.want)
			}
			// Every refusal is exactly one reason.
			for _, other := range []error{processctx.ErrInvalidContext, processctx.ErrUpdateInProgress, processctx.ErrPayloadSize} {
				if other != tc.want && errors.Is(err, other) {
					t.Fatalf("ParseHeader: %v also matches %v", err, other)
				}
			}
		})
	}

	// A configured limit below the default applies.
	if _, err := processctx.ParseHeader(header("OTEL_CTX", 2, 300, 1, 1), 299); !errors.Is(err, processctx.ErrPayloadSize) {
		t.Fatalf("payload_size over a custom limit: %v", err)
	}
}

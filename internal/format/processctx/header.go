// SPDX-License-Identifier: Apache-2.0

// Package processctx reads an OTEP 4719 process context from another
// process: the header, the lock-free read protocol and the payload.
package processctx

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Header layout (host byte order).
const (
	HeaderSize          = 32
	offVersion          = 8
	offPayloadSize      = 12
	OffsetPublishedAtNs = 16 // offset of published_at_ns, the version stamp
	offPayload          = 24

	Version = 2
	// DefaultMaxPayloadSize is the eBPF profiler's bound on payload_size.
	DefaultMaxPayloadSize = 64 << 10
)

// Signature is written last on first publication.
var Signature = [8]byte{'O', 'T', 'E', 'L', '_', 'C', 'T', 'X'}

// Sentinel errors, one per reason a read is refused.
var (
	// ErrInvalidContext: bad signature or unsupported version; skip the mapping.
	ErrInvalidContext = errors.New("invalid process context header")
	// ErrUpdateInProgress: published_at_ns is 0, the publisher is mid-update.
	ErrUpdateInProgress = errors.New("process context update in progress")
	// ErrConcurrentUpdate: the stamp kept changing across the bounded retries.
	ErrConcurrentUpdate = errors.New("process context changed during read")
	// ErrPayloadSize: payload_size is 0 or over the configured limit.
	ErrPayloadSize      = errors.New("process context payload size out of bounds")
	ErrMalformedPayload = errors.New("malformed process context payload")
)

type Header struct {
	Version       uint32
	PayloadSize   uint32
	PublishedAtNs uint64
	PayloadAddr   uint64
}

func ParseHeader(b []byte, maxPayload uint32) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes", ErrInvalidContext, len(b))
	}
	if [8]byte(b[:8]) != Signature {
		return Header{}, fmt.Errorf("%w: signature %q", ErrInvalidContext, b[:8])
	}
	h := Header{
		Version:       binary.NativeEndian.Uint32(b[offVersion:]),
		PayloadSize:   binary.NativeEndian.Uint32(b[offPayloadSize:]),
		PublishedAtNs: binary.NativeEndian.Uint64(b[OffsetPublishedAtNs:]),
		PayloadAddr:   binary.NativeEndian.Uint64(b[offPayload:]),
	}
	if h.Version != Version {
		return h, fmt.Errorf("%w: version %d", ErrInvalidContext, h.Version)
	}
	if h.PublishedAtNs == 0 {
		return h, ErrUpdateInProgress
	}
	if h.PayloadSize == 0 || h.PayloadSize > maxPayload {
		return h, fmt.Errorf("%w: %d bytes (limit %d)", ErrPayloadSize, h.PayloadSize, maxPayload)
	}
	return h, nil
}

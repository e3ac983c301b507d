// SPDX-License-Identifier: Apache-2.0

package processctx

import (
	"errors"
	"fmt"
	"runtime"
)

type Memory interface {
	ReadAt(p []byte, addr uint64) error
	ReadUint64(addr uint64) (uint64, error)
}

// DefaultAttempts bounds retries on a concurrent update, as the eBPF profiler does.
const DefaultAttempts = 3

// Raw: the payload was read between two equal observations of the stamp.
type Raw struct {
	PublishedAtNs uint64
	Payload       []byte
}

type ReadStats struct {
	Retries int
}

// ReadRaw runs the OTEP 4719 read protocol (docs/process-context.md): header,
// non-zero stamp, payload, stamp again; equal means consistent, else retry.
// buf is reused when large enough, so a poller need not allocate.
func ReadRaw(mem Memory, addr uint64, maxPayload uint32, attempts int, buf []byte) (Raw, ReadStats, error) {
	var st ReadStats
	var hdr [HeaderSize]byte
	lastErr := ErrConcurrentUpdate
	for i := 0; i < attempts; i++ {
		if i > 0 {
			st.Retries++
			// Let a writer preempted mid-update on this CPU finish: a yield, not a sleep.
			runtime.Gosched()
		}
		if err := mem.ReadAt(hdr[:], addr); err != nil {
			return Raw{}, st, err
		}
		h, err := ParseHeader(hdr[:], maxPayload)
		if errors.Is(err, ErrUpdateInProgress) {
			lastErr = ErrUpdateInProgress
			continue
		}
		if err != nil {
			return Raw{}, st, err
		}
		if cap(buf) < int(h.PayloadSize) {
			buf = make([]byte, h.PayloadSize)
		}
		payload := buf[:h.PayloadSize]
		if err := mem.ReadAt(payload, h.PayloadAddr); err != nil {
			// The pointer may have been swapped (old payload freed) mid-read:
			// check the stamp before blaming the publisher.
			if again, serr := mem.ReadUint64(addr + OffsetPublishedAtNs); serr == nil && again != h.PublishedAtNs {
				lastErr = ErrConcurrentUpdate
				continue
			}
			return Raw{}, st, fmt.Errorf("payload: %w", err)
		}
		again, err := mem.ReadUint64(addr + OffsetPublishedAtNs)
		if err != nil {
			return Raw{}, st, err
		}
		if again != h.PublishedAtNs {
			lastErr = ErrConcurrentUpdate
			continue
		}
		return Raw{PublishedAtNs: h.PublishedAtNs, Payload: payload}, st, nil
	}
	if errors.Is(lastErr, ErrUpdateInProgress) {
		return Raw{}, st, fmt.Errorf("%w after %d attempts: %w", ErrConcurrentUpdate, attempts, lastErr)
	}
	return Raw{}, st, fmt.Errorf("%w after %d attempts", ErrConcurrentUpdate, attempts)
}

// ReadStamp is the steady-state poll: the payload is re-read only when it changes.
func ReadStamp(mem Memory, addr uint64) (uint64, error) {
	return mem.ReadUint64(addr + OffsetPublishedAtNs)
}

// Read runs ReadRaw (DefaultAttempts) and Decode.
func Read(mem Memory, addr uint64, lim Limits) (Context, DecodeStats, error) {
	raw, _, err := ReadRaw(mem, addr, lim.MaxPayloadSize, DefaultAttempts, nil)
	if err != nil {
		return Context{}, DecodeStats{}, err
	}
	c, st, err := Decode(raw.Payload, lim)
	c.PublishedAtNs = raw.PublishedAtNs
	return c, st, err
}

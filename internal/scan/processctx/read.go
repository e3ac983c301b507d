package processctx

import (
	"errors"
	"fmt"
	"runtime"
)

// Memory reads the target process's address space.
type Memory interface {
	ReadAt(p []byte, addr uint64) error
	ReadUint64(addr uint64) (uint64, error)
}

// DefaultAttempts bounds the read protocol's retries on a concurrent update,
// as the eBPF profiler does.
const DefaultAttempts = 3

// Raw is a consistent snapshot of a process context: the stamp and the
// payload bytes read between two equal observations of that stamp.
type Raw struct {
	PublishedAtNs uint64
	Payload       []byte
}

// ReadStats reports what a read cost, for telemetry.
type ReadStats struct {
	// Retries counts restarts caused by an update in progress or a stamp
	// that changed while reading.
	Retries int
}

// ReadRaw runs the OTEP 4719 read protocol on the header at addr:
//
//  1. read the header; signature and version must match;
//  2. published_at_ns must be non-zero, else retry;
//  3. read payload_size (bounded by maxPayload) bytes at payload;
//  4. re-read published_at_ns; equal means consistent, else retry.
//
// At most attempts rounds are made. buf is reused for the payload when large
// enough, so a caller polling the same process can avoid allocating.
func ReadRaw(mem Memory, addr uint64, maxPayload uint32, attempts int, buf []byte) (Raw, ReadStats, error) {
	var st ReadStats
	var hdr [HeaderSize]byte
	lastErr := ErrConcurrentUpdate
	for i := 0; i < attempts; i++ {
		if i > 0 {
			st.Retries++
			// Give a writer preempted mid-update on this CPU a chance to
			// finish; this is a yield, not a sleep.
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
			// A payload pointer that does not resolve may also be a pointer
			// swapped (and the old payload freed) mid-read: check the stamp
			// before blaming the publisher.
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

// ReadStamp reads only published_at_ns: the steady-state poll. A caller that
// cached the stamp of its last full read re-reads the payload only when this
// differs.
func ReadStamp(mem Memory, addr uint64) (uint64, error) {
	return mem.ReadUint64(addr + OffsetPublishedAtNs)
}

// Read is the one-shot entry point: the read protocol at addr (bounded by
// lim.MaxPayloadSize, DefaultAttempts rounds) and the decode of the payload.
func Read(mem Memory, addr uint64, lim Limits) (Context, DecodeStats, error) {
	raw, _, err := ReadRaw(mem, addr, lim.MaxPayloadSize, DefaultAttempts, nil)
	if err != nil {
		return Context{}, DecodeStats{}, err
	}
	c, st, err := Decode(raw.Payload, lim)
	c.PublishedAtNs = raw.PublishedAtNs
	return c, st, err
}

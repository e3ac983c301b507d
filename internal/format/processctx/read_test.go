// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctx_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/remote"
)

// fakeMem is a scripted address space: regions of bytes, and a hook run
// before every read so a test can play the writer between the reader's
// steps. It fails like remote.Memory: unmapped ranges are ErrBadAddress.
type fakeMem struct {
	regions map[uint64][]byte
	reads   []fakeRead
	before  func(n int) // called before read n (0-based)
}

type fakeRead struct {
	addr uint64
	n    int
}

func (m *fakeMem) ReadAt(p []byte, addr uint64) error {
	if m.before != nil {
		m.before(len(m.reads))
	}
	m.reads = append(m.reads, fakeRead{addr, len(p)})
	for start, b := range m.regions {
		if addr >= start && addr+uint64(len(p)) <= start+uint64(len(b)) {
			copy(p, b[addr-start:])
			return nil
		}
	}
	return fmt.Errorf("fake read of %d bytes at %#x: %w", len(p), addr, remote.ErrBadAddress)
}

func (m *fakeMem) ReadUint64(addr uint64) (uint64, error) {
	var b [8]byte
	if err := m.ReadAt(b[:], addr); err != nil {
		return 0, err
	}
	return binary.NativeEndian.Uint64(b[:]), nil
}

const (
	hdrAddr  = 0x10000
	payAddrA = 0x20000
	payAddrB = 0x30000
	limit    = processctx.DefaultMaxPayloadSize
)

// publish (re)writes the header at hdrAddr and the payload at addr, as a
// publisher does; stamp 0 marks an update in progress.
func (m *fakeMem) publish(payload []byte, addr, stamp uint64) {
	if m.regions == nil {
		m.regions = map[uint64][]byte{}
	}
	m.regions[hdrAddr] = header("OTEL_CTX", 2, uint32(len(payload)), stamp, addr)
	m.regions[addr] = append([]byte(nil), payload...)
}

func (m *fakeMem) setStamp(stamp uint64) {
	binary.NativeEndian.PutUint64(m.regions[hdrAddr][processctx.OffsetPublishedAtNs:], stamp)
}

var (
	payloadA = []byte("payload A: consistent")
	payloadB = []byte("payload B: the update, longer")
)

func TestReadRawConsistent(t *testing.T) {
	m := &fakeMem{}
	m.publish(payloadA, payAddrA, 100)
	raw, st, err := processctx.ReadRaw(m, hdrAddr, limit, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if raw.PublishedAtNs != 100 || !bytes.Equal(raw.Payload, payloadA) || st.Retries != 0 {
		t.Fatalf("ReadRaw = %d %q retries %d", raw.PublishedAtNs, raw.Payload, st.Retries)
	}
	// The protocol: header, payload, stamp re-read, and nothing else.
	want := []fakeRead{{hdrAddr, 32}, {payAddrA, len(payloadA)}, {hdrAddr + 16, 8}}
	if fmt.Sprint(m.reads) != fmt.Sprint(want) {
		t.Fatalf("reads %v, want %v", m.reads, want)
	}
}

func TestReadRawUpdateInProgressThenSuccess(t *testing.T) {
	for _, busy := range []int{1, 2} {
		t.Run(fmt.Sprintf("busy%d", busy), func(t *testing.T) {
			m := &fakeMem{}
			m.publish(payloadA, payAddrA, 0) // update in progress
			m.before = func(n int) {
				if n == busy { // the writer finishes before the reader's next header read
					m.publish(payloadB, payAddrB, 200)
				}
			}
			raw, st, err := processctx.ReadRaw(m, hdrAddr, limit, 3, nil)
			if err != nil {
				t.Fatal(err)
			}
			if raw.PublishedAtNs != 200 || !bytes.Equal(raw.Payload, payloadB) {
				t.Fatalf("ReadRaw = %d %q", raw.PublishedAtNs, raw.Payload)
			}
			if st.Retries != busy {
				t.Fatalf("Retries = %d, want %d", st.Retries, busy)
			}
			// In-progress headers cost one read each: the payload is not read.
			if len(m.reads) != busy+3 {
				t.Fatalf("%d reads, want %d: %v", len(m.reads), busy+3, m.reads)
			}
		})
	}
}

func TestReadRawStampChangesMidRead(t *testing.T) {
	m := &fakeMem{}
	m.publish(payloadA, payAddrA, 100)
	m.before = func(n int) {
		if n == 1 { // between the header read and the payload read
			// In place, so the reader gets the new bytes with the old stamp.
			m.regions[payAddrA] = []byte("payload A': torn!!!!!")
			m.setStamp(101)
		}
	}
	raw, st, err := processctx.ReadRaw(m, hdrAddr, limit, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Retries != 1 {
		t.Fatalf("Retries = %d, want 1", st.Retries)
	}
	if raw.PublishedAtNs != 101 || string(raw.Payload) != "payload A': torn!!!!!" {
		t.Fatalf("ReadRaw = %d %q: stamp and payload must belong together", raw.PublishedAtNs, raw.Payload)
	}
}

func TestReadRawAttemptsExhausted(t *testing.T) {
	for _, attempts := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("changing/attempts%d", attempts), func(t *testing.T) {
			m := &fakeMem{}
			stamp := uint64(100)
			m.publish(payloadA, payAddrA, stamp)
			m.before = func(n int) {
				if n%3 == 1 { // every payload read races an update
					stamp++
					m.setStamp(stamp)
				}
			}
			_, st, err := processctx.ReadRaw(m, hdrAddr, limit, attempts, nil)
			if !errors.Is(err, processctx.ErrConcurrentUpdate) {
				t.Fatalf("err = %v, want ErrConcurrentUpdate", err)
			}
			if errors.Is(err, processctx.ErrUpdateInProgress) {
				t.Fatalf("err = %v: no update was seen in progress", err)
			}
			if st.Retries != attempts-1 {
				t.Fatalf("Retries = %d, want %d", st.Retries, attempts-1)
			}
			if len(m.reads) != 3*attempts {
				t.Fatalf("%d reads, want %d", len(m.reads), 3*attempts)
			}
		})
		t.Run(fmt.Sprintf("inProgress/attempts%d", attempts), func(t *testing.T) {
			m := &fakeMem{}
			m.publish(payloadA, payAddrA, 0)
			_, st, err := processctx.ReadRaw(m, hdrAddr, limit, attempts, nil)
			if !errors.Is(err, processctx.ErrConcurrentUpdate) || !errors.Is(err, processctx.ErrUpdateInProgress) {
				t.Fatalf("err = %v, want ErrConcurrentUpdate wrapping ErrUpdateInProgress", err)
			}
			if st.Retries != attempts-1 || len(m.reads) != attempts {
				t.Fatalf("Retries = %d, reads %d; want %d, %d", st.Retries, len(m.reads), attempts-1, attempts)
			}
		})
	}
}

func TestReadRawBadPayloadPointer(t *testing.T) {
	m := &fakeMem{}
	m.publish(payloadA, payAddrA, 100)
	binary.NativeEndian.PutUint64(m.regions[hdrAddr][24:], 0x10) // points nowhere
	_, st, err := processctx.ReadRaw(m, hdrAddr, limit, 3, nil)
	if !errors.Is(err, remote.ErrBadAddress) {
		t.Fatalf("err = %v, want ErrBadAddress", err)
	}
	if errors.Is(err, processctx.ErrConcurrentUpdate) || st.Retries != 0 {
		t.Fatalf("err = %v, retries %d: a stable bad pointer is the publisher's fault, not a race", err, st.Retries)
	}
}

func TestReadRawPayloadSwappedAndFreed(t *testing.T) {
	m := &fakeMem{}
	m.publish(payloadA, payAddrA, 100)
	m.before = func(n int) {
		if n == 1 { // the writer moves the payload and frees the old one
			delete(m.regions, payAddrA)
			m.publish(payloadB, payAddrB, 101)
		}
	}
	raw, st, err := processctx.ReadRaw(m, hdrAddr, limit, 3, nil)
	if err != nil {
		t.Fatalf("ReadRaw: %v (a payload freed by an update must be retried)", err)
	}
	if st.Retries != 1 || raw.PublishedAtNs != 101 || !bytes.Equal(raw.Payload, payloadB) {
		t.Fatalf("ReadRaw = %d %q, retries %d", raw.PublishedAtNs, raw.Payload, st.Retries)
	}
}

func TestReadRawRefusals(t *testing.T) {
	t.Run("unmapped header", func(t *testing.T) {
		m := &fakeMem{}
		_, _, err := processctx.ReadRaw(m, hdrAddr, limit, 3, nil)
		if !errors.Is(err, remote.ErrBadAddress) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bad signature", func(t *testing.T) {
		m := &fakeMem{}
		m.publish(payloadA, payAddrA, 100)
		copy(m.regions[hdrAddr], "NOT_OTEL")
		_, st, err := processctx.ReadRaw(m, hdrAddr, limit, 3, nil)
		if !errors.Is(err, processctx.ErrInvalidContext) || st.Retries != 0 || len(m.reads) != 1 {
			t.Fatalf("err = %v, retries %d, reads %d", err, st.Retries, len(m.reads))
		}
	})
	t.Run("oversized payload is not read", func(t *testing.T) {
		m := &fakeMem{}
		m.publish(payloadA, payAddrA, 100)
		binary.NativeEndian.PutUint32(m.regions[hdrAddr][12:], 100000000)
		_, _, err := processctx.ReadRaw(m, hdrAddr, limit, 3, nil)
		if !errors.Is(err, processctx.ErrPayloadSize) || len(m.reads) != 1 {
			t.Fatalf("err = %v, reads %v", err, m.reads)
		}
	})
}

func TestReadRawReusesBuffer(t *testing.T) {
	m := &fakeMem{}
	m.publish(payloadA, payAddrA, 100)
	buf := make([]byte, 0, 1024)
	raw, _, err := processctx.ReadRaw(m, hdrAddr, limit, 3, buf)
	if err != nil {
		t.Fatal(err)
	}
	if &raw.Payload[0] != &buf[:1][0] {
		t.Fatal("a large enough buffer was not reused")
	}
	small := make([]byte, 0, 4)
	raw, _, err = processctx.ReadRaw(m, hdrAddr, limit, 3, small)
	if err != nil || !bytes.Equal(raw.Payload, payloadA) {
		t.Fatalf("ReadRaw with a small buffer: %q, %v", raw.Payload, err)
	}
}

func TestReadStamp(t *testing.T) {
	m := &fakeMem{}
	m.publish(payloadA, payAddrA, 0x1122334455667788)
	got, err := processctx.ReadStamp(m, hdrAddr)
	if err != nil || got != 0x1122334455667788 {
		t.Fatalf("ReadStamp = %#x, %v", got, err)
	}
	if len(m.reads) != 1 || m.reads[0] != (fakeRead{hdrAddr + 16, 8}) {
		t.Fatalf("ReadStamp reads %v, want one 8-byte read of published_at_ns", m.reads)
	}
}

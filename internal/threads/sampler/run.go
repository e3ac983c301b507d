// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/proc/bootclock"
)

type item struct {
	sample Sample
	prctl  int // > 0: a prctl event
}

// clockRefresh: the boot → wall offset moves when the wall clock is stepped or slewed.
const clockRefresh = 5 * time.Second

// Run delivers samples and prctl PIDs on its goroutine until Close; only
// one Run at a time.
func (s *Sampler) Run(onSample func(Sample), onPrctl func(pid int)) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	if s.running {
		s.mu.Unlock()
		return errors.New("sampler: Run is already running")
	}
	s.running = true
	// Registered under mu, so Close waits for exactly these readers.
	items := make(chan item, 256)
	errc := make(chan error, 2)
	stop := make(chan struct{})
	s.samples.SetDeadline(time.Time{}) // a failed earlier Run set one
	s.prctl.SetDeadline(time.Time{})
	s.readersWG.Add(2)
	go s.read(s.samples, items, errc, stop, s.decodeSample, nil)
	go s.readPrctl(items, errc, stop)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()

	tick := time.NewTicker(clockRefresh)
	defer tick.Stop()
	for {
		select {
		case it := <-items:
			if it.prctl > 0 {
				if onPrctl != nil {
					onPrctl(it.prctl)
				}
			} else if onSample != nil {
				onSample(it.sample)
			}
		case <-tick.C:
			s.refreshClock()
		case err := <-errc:
			// A reader failed: stop the other. Flush, not SetDeadline, wakes
			// a blocked ReadInto (SetDeadline takes the lock ReadInto holds).
			close(stop)
			_ = s.samples.Flush()
			_ = s.prctl.Flush()
			s.readersWG.Wait()
			return err
		case <-s.done:
			s.readersWG.Wait()
			return nil
		}
	}
}

// read delivers the decoded records of rd. before, when set, runs before
// each read and stops the reader by returning false.
func (s *Sampler) read(rd *ringbuf.Reader, items chan<- item, errc chan<- error, stop <-chan struct{}, decode func([]byte) (item, bool), before func() bool) {
	defer s.readersWG.Done()
	var rec ringbuf.Record
	for {
		if before != nil && !before() {
			return
		}
		if err := rd.ReadInto(&rec); err != nil {
			select {
			case <-stop: // Run flushed us to stop
				return
			default:
			}
			if errors.Is(err, ringbuf.ErrFlushed) {
				continue // a flush that was not a stop: keep reading
			}
			if !errors.Is(err, ringbuf.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) {
				errc <- fmt.Errorf("sampler: reading ring buffer: %w", err)
			}
			return
		}
		it, ok := decode(rec.RawSample)
		if !ok {
			continue
		}
		select {
		case items <- it:
		case <-stop:
			return
		case <-s.done:
			return
		}
	}
}

// prctlPace is the least time between two batches of prctl events: any
// process can call prctl in a loop, and waking for each event costs more
// than the event. The first event after a quiet spell is delivered at
// once. The kernel sends at most two events per process per PrctlWindow
// (prctl_events_limited); if many processes name mappings at once the ring
// buffer fills and the kernel drops the rest (prctl_events_dropped).
const prctlPace = 200 * time.Millisecond

// maxPrctlBatch bounds the distinct PIDs of one batch (the ring buffer
// holds about 2,700 events).
const maxPrctlBatch = 4096

// readPrctl is read for the prctl ring buffer, delivering each batch's
// PIDs once each, at most one batch per prctlPace.
func (s *Sampler) readPrctl(items chan<- item, errc chan<- error, stop <-chan struct{}) {
	var batch []int
	var last time.Time
	deliver := func() bool {
		for _, pid := range batch {
			select {
			case items <- item{prctl: pid}:
			case <-stop:
				return false
			case <-s.done:
				return false
			}
		}
		batch = batch[:0]
		if wait := prctlPace - time.Since(last); wait > 0 {
			select {
			case <-time.After(wait):
			case <-stop:
				return false
			case <-s.done:
				return false
			}
		}
		last = time.Now()
		return true
	}
	s.read(s.prctl, nil, errc, stop, func(b []byte) (item, bool) {
		if it, ok := decodePrctl(b); ok && !slices.Contains(batch, it.prctl) && len(batch) < maxPrctlBatch {
			batch = append(batch, it.prctl)
		}
		return item{}, false
	}, func() bool { return s.prctlPending() || deliver() })
}

// prctlPending reports whether the prctl ring holds unread events; false
// once the rings are released.
func (s *Sampler) prctlPending() bool {
	s.ringsMu.RLock()
	defer s.ringsMu.RUnlock()
	return !s.ringsClosed && s.prctl.AvailableBytes() > 0
}

// decodeSample copies Record out: ReadInto reuses its buffer.
func (s *Sampler) decodeSample(b []byte) (item, bool) {
	if len(b) < eventHeaderSize {
		return item{}, false
	}
	ne := binary.NativeEndian
	flags := ne.Uint16(b[16:])
	n := int(ne.Uint16(b[18:]))
	if n > len(b)-eventHeaderSize {
		return item{}, false
	}
	boot := ne.Uint64(b[8:])
	smp := Sample{
		PID:    int(ne.Uint32(b[0:])),
		TID:    int(ne.Uint32(b[4:])),
		BootNs: boot,
		Time:   s.wallTime(boot),
		OffCPU: flags&flagOffCPU != 0,

		Followed: flags&flagFollowed != 0,
	}
	data := b[eventHeaderSize : eventHeaderSize+n]
	if flags&flagDD != 0 {
		if n != ddFieldsSize {
			return item{}, false
		}
		smp.Read = ReadBufferSlot
		smp.SlotTID = int(ne.Uint32(b[20:]))
		smp.Slot = ddotel.Slot{TraceIDHigh: ne.Uint64(data), TraceIDLow: ne.Uint64(data[8:]), SpanID: ne.Uint64(data[16:])}
		smp.SlotNotResident = flags&flagNull != 0
		return item{sample: smp}, true
	}
	smp.NotAllocated = flags&flagNotAllocated != 0
	if n > 0 {
		smp.Record = append([]byte(nil), data...)
	}
	return item{sample: smp}, true
}

func decodePrctl(b []byte) (item, bool) {
	if len(b) < 16 {
		return item{}, false
	}
	pid := int(binary.NativeEndian.Uint32(b[0:]))
	return item{prctl: pid}, pid > 0
}

func (s *Sampler) refreshClock() {
	off, ok := bootclock.WallOffset()
	if !ok {
		return
	}
	s.clockMu.Lock()
	s.offset = off
	s.clockMu.Unlock()
}

func (s *Sampler) wallTime(bootNs uint64) time.Time {
	s.clockMu.Lock()
	off := s.offset
	s.clockMu.Unlock()
	return time.Unix(0, int64(bootNs)+off)
}

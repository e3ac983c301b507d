// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// ownTicks: cpu-clock perf events running on_tick, opened and closed by the
// follow policy under the Sampler's mu.
type ownTicks struct {
	prog  *ebpf.Program
	cpus  []int
	hz    int
	fds   []int
	links []link.Link
}

func (t *ownTicks) isOpen() bool { return len(t.fds) > 0 }

// open closes what it opened on failure.
func (t *ownTicks) open() error {
	if t.isOpen() {
		return nil
	}
	for _, cpu := range t.cpus {
		if err := t.openCPU(cpu); err != nil {
			_ = t.close()
			return err
		}
	}
	return nil
}

func (t *ownTicks) openCPU(cpu int) error {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: uint64(t.hz),
		Bits:   unix.PerfBitFreq,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("%w: perf_event_open(cpu-clock, cpu %d): %w", ErrUnavailable, cpu, err)
	}
	t.fds = append(t.fds, fd)
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: t.prog, Attach: ebpf.AttachPerfEvent})
	switch {
	case err == nil:
		t.links = append(t.links, l)
	case errors.Is(err, link.ErrNotSupported):
		// Before 5.15 no perf_event links: attached until the fd closes.
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, t.prog.FD()); err != nil {
			return fmt.Errorf("%w: PERF_EVENT_IOC_SET_BPF on cpu %d: %w", ErrUnavailable, cpu, err)
		}
	default:
		return fmt.Errorf("%w: attaching on_tick to cpu %d: %w", ErrUnavailable, cpu, err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return fmt.Errorf("%w: enabling the perf event on cpu %d: %w", ErrUnavailable, cpu, err)
	}
	return nil
}

// close detaches first, so on_tick stops.
func (t *ownTicks) close() error {
	var errs []error
	for _, l := range t.links {
		errs = append(errs, l.Close())
	}
	t.links = nil
	for _, fd := range t.fds {
		errs = append(errs, unix.Close(fd))
	}
	t.fds = nil
	return errors.Join(errs...)
}

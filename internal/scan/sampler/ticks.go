package sampler

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// ownTicks are the sampler's own cpu-clock perf events, one per online
// CPU, each running on_tick. The follow policy may open and close them
// while the sampler runs; the Sampler's mu guards them.
type ownTicks struct {
	prog  *ebpf.Program
	cpus  []int
	hz    int
	fds   []int
	links []link.Link
}

func (t *ownTicks) isOpen() bool { return len(t.fds) > 0 }

// open opens a cpu-clock perf event per CPU with on_tick linked to it; on
// failure what was opened is closed again.
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
		// Kernels before 5.15 have no perf_event links: the program
		// stays attached until the perf event fd is closed.
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

// close detaches on_tick (links first, so it stops) and closes the events.
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

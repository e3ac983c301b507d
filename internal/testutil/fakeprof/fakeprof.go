// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package fakeprof is a stand-in for a host profiler in tests: a perf_event
// BPF program (cilium/ebpf/asm, no clang) on a cpu-clock event per CPU that
// records tgid, tid and CLOCK_BOOTTIME of every run, so a test knows each
// moment and thread the "profiler" sampled. Needs CAP_BPF + CAP_PERFMON.
package fakeprof

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/proc/bootclock"
	"github.com/otelctx/otelctx/internal/proc/cpulist"
)

// DefaultName fits the kernel's 15 bytes.
const DefaultName = "fake_profiler"

type Sample struct {
	PID, TID int
	BootNs   uint64    // bpf_ktime_get_boot_ns at the run
	Time     time.Time // BootNs as wall-clock time (see WallTime)
}

type Profiler struct {
	prog   *ebpf.Program
	events *ebpf.Map
	rd     *ringbuf.Reader
	fds    []int
	links  []link.Link
	id     ebpf.ProgramID
	offset int64 // CLOCK_REALTIME - CLOCK_BOOTTIME at Start

	mu      sync.Mutex
	samples []Sample
	wg      sync.WaitGroup
	drained chan struct{} // the reader found the ring empty after a flush
	stopped bool
	closed  bool
}

// recordSize: u64 pid_tgid (tgid << 32 | tid), u64 boot ns.
const recordSize = 16

// Event is the perf event (type, config) sampled on every online CPU.
type Event struct {
	Type   uint32
	Config uint64
}

var (
	// CPUClock is hrtimer-driven, as host profilers use.
	CPUClock = Event{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}
	// ContextSwitches: no hrtimer drives its samples (like hardware PMU events,
	// which a VM may lack).
	ContextSwitches = Event{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CONTEXT_SWITCHES}
)

// Start loads and attaches at hz on cpu-clock; a name over 15 bytes is
// truncated by the kernel and kept whole in the program's BTF.
func Start(hz int, name string) (*Profiler, error) {
	return StartOn(CPUClock, hz, name)
}

func StartOn(ev Event, hz int, name string) (*Profiler, error) {
	p, err := Load(name)
	if err != nil {
		return nil, err
	}
	if err := p.Attach(ev, hz); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Load loads the program without opening any perf event, as a profiler
// starting up does before it attaches (Attach).
func Load(name string) (*Profiler, error) {
	if name == "" {
		name = DefaultName
	}
	events, err := ebpf.NewMap(&ebpf.MapSpec{Name: "fakeprof_events", Type: ebpf.RingBuf, MaxEntries: 1 << 20})
	if err != nil {
		return nil, fmt.Errorf("fakeprof: ring buffer: %w", err)
	}
	offset, _ := bootclock.WallOffset() // the clocks always read on Linux
	p := &Profiler{events: events, offset: offset, drained: make(chan struct{}, 1)}
	if err := p.load(name); err != nil {
		p.Close()
		return nil, err
	}
	if p.rd, err = ringbuf.NewReader(events); err != nil {
		p.Close()
		return nil, fmt.Errorf("fakeprof: ring buffer reader: %w", err)
	}
	p.wg.Add(1)
	go p.read()
	return p, nil
}

// Attach opens ev at hz on every online CPU, running the program; on
// failure the events it opened are closed.
func (p *Profiler) Attach(ev Event, hz int) error {
	if hz <= 0 {
		return fmt.Errorf("fakeprof: bad frequency %d", hz)
	}
	cpus, err := cpulist.Online()
	if err != nil {
		return fmt.Errorf("fakeprof: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.closed || len(p.fds) > 0 {
		return errors.New("fakeprof: attached already, stopped or closed")
	}
	for _, cpu := range cpus {
		if err := p.attach(ev, cpu, hz); err != nil {
			_ = p.detach()
			return err
		}
	}
	return nil
}

// program's entry carries BTF func info, as a clang-built profiler's does,
// so its full name is known and fentry can target it.
func program(name string, events *ebpf.Map) asm.Instructions {
	fn := &btf.Func{
		Name:    name,
		Linkage: btf.GlobalFunc,
		Type: &btf.FuncProto{
			Return: &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed},
			Params: []btf.FuncParam{{Name: "ctx", Type: &btf.Pointer{Target: &btf.Struct{Name: "bpf_perf_event_data"}}}},
		},
	}
	insns := asm.Instructions{
		asm.FnGetCurrentPidTgid.Call(),
		asm.StoreMem(asm.RFP, -16, asm.R0, asm.DWord),
		asm.FnKtimeGetBootNs.Call(),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
		asm.LoadMapPtr(asm.R1, events.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -16),
		asm.Mov.Imm(asm.R3, recordSize),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnRingbufOutput.Call(),
		asm.Mov.Imm(asm.R0, 0),
		asm.Return(),
	}
	insns[0] = btf.WithFuncMetadata(insns[0], fn)
	return insns
}

func (p *Profiler) load(name string) error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         name,
		Type:         ebpf.PerfEvent,
		License:      "GPL", // bpf_ringbuf_output, bpf_ktime_get_boot_ns
		Instructions: program(name, p.events),
	})
	if err != nil {
		return fmt.Errorf("fakeprof: loading %s: %w", name, err)
	}
	p.prog = prog
	info, err := prog.Info()
	if err != nil {
		return fmt.Errorf("fakeprof: program info: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		return errors.New("fakeprof: the kernel gives no program ID")
	}
	p.id = id
	return nil
}

func (p *Profiler) attach(ev Event, cpu, hz int) error {
	attr := unix.PerfEventAttr{
		Type:   ev.Type,
		Config: ev.Config,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample: uint64(hz),
		Bits:   unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fakeprof: perf_event_open(cpu %d): %w", cpu, err)
	}
	p.fds = append(p.fds, fd)
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: p.prog, Attach: ebpf.AttachPerfEvent})
	switch {
	case err == nil:
		p.links = append(p.links, l)
	case errors.Is(err, link.ErrNotSupported): // < 5.15: no perf_event links
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, p.prog.FD()); err != nil {
			return fmt.Errorf("fakeprof: PERF_EVENT_IOC_SET_BPF on cpu %d: %w", cpu, err)
		}
	default:
		return fmt.Errorf("fakeprof: attaching to cpu %d: %w", cpu, err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return fmt.Errorf("fakeprof: enabling cpu %d: %w", cpu, err)
	}
	return nil
}

func (p *Profiler) read() {
	defer p.wg.Done()
	var rec ringbuf.Record
	for {
		if err := p.rd.ReadInto(&rec); err != nil {
			if errors.Is(err, ringbuf.ErrFlushed) {
				select {
				case p.drained <- struct{}{}:
				default:
				}
				continue
			}
			return // closed
		}
		if len(rec.RawSample) < recordSize {
			continue
		}
		ne := binary.NativeEndian
		id, boot := ne.Uint64(rec.RawSample), ne.Uint64(rec.RawSample[8:])
		s := Sample{PID: int(id >> 32), TID: int(uint32(id)), BootNs: boot, Time: p.WallTime(boot)}
		p.mu.Lock()
		p.samples = append(p.samples, s)
		p.mu.Unlock()
	}
}

func (p *Profiler) ID() ebpf.ProgramID { return p.id }

// Samples are in ring-buffer order (per CPU in time order).
func (p *Profiler) Samples() []Sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Sample(nil), p.samples...)
}

// Take returns the samples recorded since the last Take (or Start) and
// forgets them: a long-running driver (test/soak) keeps its memory flat.
func (p *Profiler) Take() []Sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.samples
	p.samples = nil
	return s
}

// Pause disables the events, leaving the program attached as a paused
// profiler's, and returns once every run is in Samples.
func (p *Profiler) Pause() error {
	if err := p.ioctlAll(unix.PERF_EVENT_IOC_DISABLE); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rd != nil && !p.closed && p.rd.Flush() == nil {
		p.mu.Unlock()
		<-p.drained
		p.mu.Lock()
	}
	return nil
}

func (p *Profiler) Resume() error { return p.ioctlAll(unix.PERF_EVENT_IOC_ENABLE) }

func (p *Profiler) ioctlAll(req uint) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.closed {
		return errors.New("fakeprof: stopped")
	}
	for _, fd := range p.fds {
		if err := unix.IoctlSetInt(fd, req, 0); err != nil {
			return fmt.Errorf("fakeprof: perf event ioctl %#x: %w", req, err)
		}
	}
	return nil
}

// Stop detaches (the program stays loaded, its ID listed) and returns once
// every run is in Samples.
func (p *Profiler) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil
	}
	p.stopped = true
	err := p.detach()
	if p.rd != nil {
		// After the flush the reader drains the ring, then reports it empty.
		if ferr := p.rd.Flush(); ferr == nil {
			p.mu.Unlock()
			<-p.drained
			p.mu.Lock()
		}
	}
	return err
}

func (p *Profiler) detach() error {
	var errs []error
	for _, l := range p.links {
		errs = append(errs, l.Close())
	}
	p.links = nil
	for _, fd := range p.fds {
		errs = append(errs, unix.Close(fd))
	}
	p.fds = nil
	return errors.Join(errs...)
}

// WallTime uses the offset measured at Start, as the sampler does.
func (p *Profiler) WallTime(bootNs uint64) time.Time {
	return time.Unix(0, int64(bootNs)+p.offset)
}

// Close unloads the program; its ID disappears once nothing else holds it.
func (p *Profiler) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	errs := []error{p.detach()}
	if p.rd != nil {
		errs = append(errs, p.rd.Close())
	}
	p.wg.Wait()
	if p.prog != nil {
		errs = append(errs, p.prog.Close())
	}
	errs = append(errs, p.events.Close())
	return errors.Join(errs...)
}

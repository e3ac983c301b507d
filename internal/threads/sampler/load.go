// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/proc/cpulist"
)

// New returns ErrUnavailable (wrapped) when the kernel does not allow it.
func New(opts Options) (*Sampler, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cpus, err := cpulist.Online()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	// ≥ 5.11 charges BPF memory to the cgroup (nothing to raise); older
	// kernels need CAP_SYS_RESOURCE to raise the limit: EPERM is explained
	// if the load then fails (memlockProblem).
	memlockErr := rlimit.RemoveMemlock()
	if memlockErr != nil && !errors.Is(memlockErr, unix.EPERM) {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, memlockErr)
	}
	spec, followSpec, fopts, err := loadSpec(opts)
	if err != nil {
		return nil, err
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		if why := memlockProblem(memlockErr); why != "" {
			return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, why, err)
		}
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("%w: verifier: %+v", ErrUnavailable, ve)
		}
		return nil, fmt.Errorf("%w: loading: %w", ErrUnavailable, err)
	}
	s := &Sampler{
		coll:     coll,
		recipes:  coll.Maps[samplerMapRecipes],
		counters: coll.Maps[samplerMapCounters],
		done:     make(chan struct{}),
		ticks:    ownTicks{prog: coll.Programs[samplerProgOnTick], cpus: cpus, hz: opts.FrequencyHz},
	}
	if err := s.start(followSpec, opts, fopts); err != nil {
		_ = s.release() // err is what is reported
		return nil, err
	}
	s.refreshClock()
	return s, nil
}

func (opts Options) withDefaults() (Options, error) {
	if opts.FrequencyHz == 0 {
		opts.FrequencyHz = DefaultFrequencyHz
	}
	if opts.ReadCap == 0 {
		opts.ReadCap = DefaultReadCap
	}
	if opts.RingBufferSize == 0 {
		opts.RingBufferSize = DefaultRingBufferSize
	}
	if opts.MaxProcesses == 0 {
		opts.MaxProcesses = MaxTracked
	}
	if opts.PrctlWindow == 0 {
		opts.PrctlWindow = DefaultPrctlWindow
	}
	switch {
	case opts.MaxProcesses < 0 || opts.MaxProcesses > 1<<20:
		return opts, fmt.Errorf("sampler: MaxProcesses %d outside [1, %d]", opts.MaxProcesses, 1<<20)
	case opts.FrequencyHz < 0:
		return opts, fmt.Errorf("sampler: FrequencyHz %d < 0", opts.FrequencyHz)
	case opts.ReadCap < headerSize || opts.ReadCap > MaxReadCap:
		return opts, fmt.Errorf("sampler: ReadCap %d outside [%d, %d]", opts.ReadCap, headerSize, MaxReadCap)
	case opts.RingBufferSize < os.Getpagesize() || opts.RingBufferSize&(opts.RingBufferSize-1) != 0:
		return opts, fmt.Errorf("sampler: RingBufferSize %d is not a power of two ≥ the page size", opts.RingBufferSize)
	case opts.PrctlWindow < 0:
		return opts, fmt.Errorf("sampler: PrctlWindow %v < 0", opts.PrctlWindow)
	case opts.PrctlHook != PrctlHookAuto && opts.PrctlHook != PrctlHookRawTracepoint:
		return opts, fmt.Errorf("sampler: PrctlHook %q is neither auto (\"\") nor %q", opts.PrctlHook, PrctlHookRawTracepoint)
	}
	return opts, nil
}

// loadSpec also returns a full copy for the programs loaded on their own later.
func loadSpec(opts Options) (spec, full *ebpf.CollectionSpec, fopts FollowOptions, err error) {
	spec, err = loadSampler()
	if err != nil {
		return nil, nil, fopts, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	spec.Maps[samplerMapSamples].MaxEntries = uint32(opts.RingBufferSize)
	spec.Maps[samplerMapRecipes].MaxEntries = uint32(opts.MaxProcesses)
	if err := spec.Variables[samplerVarReadCap].Set(uint32(opts.ReadCap)); err != nil {
		return nil, nil, fopts, fmt.Errorf("sampler: setting read_cap: %w", err)
	}
	if err := spec.Variables[samplerVarPrctlWindowNs].Set(uint64(opts.PrctlWindow)); err != nil {
		return nil, nil, fopts, fmt.Errorf("sampler: setting prctl_window_ns: %w", err)
	}
	bootOffset, err := timensBootOffset("/proc/self/timens_offsets")
	if err != nil {
		return nil, nil, fopts, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := spec.Variables[samplerVarBootOffsetNs].Set(bootOffset); err != nil {
		return nil, nil, fopts, fmt.Errorf("sampler: setting boot_offset_ns: %w", err)
	}
	if fopts, err = opts.Follow.withDefaults(); err != nil {
		return nil, nil, fopts, err
	}
	if len(fopts.Programs) > 0 {
		if err := spec.Variables[samplerVarSweventHrtimerFn].Set(swEventHrtimerAddr("/proc/kallsyms")); err != nil {
			return nil, nil, fopts, fmt.Errorf("sampler: setting swevent_hrtimer_fn: %w", err)
		}
	}
	// Follow programs' targets are only known later (follow.go).
	full = spec.Copy()
	delete(spec.Programs, samplerProgOnProfilerTimer)
	delete(spec.Programs, samplerProgOnProfilerEntry)
	// A kernel without bpf_task_pt_regs refuses it: that must not fail the collection.
	delete(spec.Programs, samplerProgOnPrctlExit)
	if !opts.OffCPU {
		// tp_btf needs its target in the kernel's BTF: not required when unused.
		delete(spec.Programs, samplerProgOnSwitch)
	}
	return spec, full, fopts, nil
}

// start opens the readers before following: release neither stops the
// follower nor detaches what it attached, so nothing may fail after it.
func (s *Sampler) start(full *ebpf.CollectionSpec, opts Options, fopts FollowOptions) error {
	if err := s.attach(s.coll, full, opts); err != nil {
		return err
	}
	var err error
	if s.samples, err = newRingReader(s.coll.Maps[samplerMapSamples]); err == nil {
		s.prctl, err = newRingReader(s.coll.Maps[samplerMapPrctlEvents])
	}
	if err != nil {
		return fmt.Errorf("%w: ring buffer reader: %w", ErrUnavailable, err)
	}
	return s.startFollowing(full, fopts)
}

// newRingReader is a variable so a test can make it fail.
var newRingReader = ringbuf.NewReader

// attach records each link in s so that release undoes a partial attach.
func (s *Sampler) attach(coll *ebpf.Collection, full *ebpf.CollectionSpec, opts Options) error {
	if len(opts.Follow.Programs) == 0 || opts.Follow.OwnTicks == OwnTicksAlways {
		if err := s.ticks.open(); err != nil {
			return err
		}
	}
	if opts.PrctlHook == PrctlHookAuto {
		if l, err := s.attachPrctlTracepoint(full); err == nil {
			s.links = append(s.links, l)
			s.prctlHook = PrctlHookTracepoint
		}
	}
	if s.prctlHook == PrctlHookAuto {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_exit", Program: coll.Programs[samplerProgOnSysExit]})
		if err != nil {
			return fmt.Errorf("%w: attaching raw_tracepoint/sys_exit: %w", ErrUnavailable, err)
		}
		s.links = append(s.links, l)
		s.prctlHook = PrctlHookRawTracepoint
	}
	if opts.OffCPU {
		l, err := link.AttachTracing(link.TracingOptions{Program: coll.Programs[samplerProgOnSwitch]})
		if err != nil {
			return fmt.Errorf("%w: attaching tp_btf/sched_switch: %w", ErrUnavailable, err)
		}
		s.links = append(s.links, l)
	}
	return nil
}

// attachPrctlTracepoint fails without tracefs, syscall tracepoints or
// bpf_task_pt_regs (< 5.15); the caller falls back to the raw tracepoint.
func (s *Sampler) attachPrctlTracepoint(full *ebpf.CollectionSpec) (link.Link, error) {
	cs := &ebpf.CollectionSpec{
		Maps:      full.Maps,
		Programs:  map[string]*ebpf.ProgramSpec{samplerProgOnPrctlExit: full.Programs[samplerProgOnPrctlExit].Copy()},
		Types:     full.Types,
		ByteOrder: full.ByteOrder,
	}
	coll, err := ebpf.NewCollectionWithOptions(cs, ebpf.CollectionOptions{MapReplacements: s.coll.Maps})
	if err != nil {
		return nil, err
	}
	prog := coll.DetachProgram(samplerProgOnPrctlExit)
	coll.Close()
	l, err := attachTracepoint("syscalls", "sys_exit_prctl", prog)
	if err != nil {
		prog.Close()
		return nil, err
	}
	s.prctlProg = prog
	return l, nil
}

// release closes links first, so the programs stop running.
func (s *Sampler) release() error {
	var errs []error
	for _, l := range s.links {
		errs = append(errs, l.Close())
	}
	s.links = nil
	if s.prctlProg != nil {
		errs = append(errs, s.prctlProg.Close())
		s.prctlProg = nil
	}
	errs = append(errs, s.ticks.close())
	s.ringsMu.Lock()
	for _, rd := range []*ringbuf.Reader{s.samples, s.prctl} {
		if rd != nil {
			errs = append(errs, rd.Close())
		}
	}
	s.ringsClosed = true
	s.ringsMu.Unlock()
	if s.coll != nil {
		s.coll.Close()
		s.coll = nil
	}
	return errors.Join(errs...)
}

// timensBootOffset: /proc shows start times shifted by the reader's time
// namespace boottime offset, the kernel's start_boottime is not. No file: 0.
func timensBootOffset(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		// "boottime <seconds> <nanoseconds>" (or its clock id 7).
		if len(f) != 3 || (f[0] != "boottime" && f[0] != "7") {
			continue
		}
		sec, err1 := strconv.ParseInt(f[1], 10, 64)
		nsec, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("%s: bad line %q", path, line)
		}
		return sec*1e9 + nsec, nil
	}
	return 0, nil
}

// Package sampler reads thread contexts from inside the kernel: a BPF
// program on the sampled thread reads its OTEP 4947 record and/or its
// DD_OTEL_CTX slot per its process's recipe and hands them to user space
// through a ring buffer; another reports prctl calls that name a process
// context. The BPF side is sampler.bpf.c (bpf2go objects committed, `make
// generate`); README.md has the maps, the events and the requirements.
package sampler

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/otelctx/otelctx/internal/scan/ddotel"
)

// ErrUnavailable: the kernel refused to load or attach (no BPF, no BTF, no
// privileges). Wrapped with the reason; callers fall back to ptrace.
var ErrUnavailable = errors.New("eBPF sampler unavailable")

// Defaults and limits of Options.
const (
	DefaultFrequencyHz    = 97
	DefaultReadCap        = 640 // threadctx.DefaultReadCap
	DefaultRingBufferSize = 1 << 20
	// MaxReadCap is the compile-time bound of one record read in the BPF
	// program (MAX_READ in sampler.bpf.c).
	MaxReadCap = 1024
	// MaxTracked is the default capacity of the pid → recipe map.
	MaxTracked = 4096
	// HeaderSize is the OTEP 4947 record header (threadctx.HeaderSize).
	headerSize = 28
)

// Options configure a Sampler. Zero values take the defaults.
type Options struct {
	// FrequencyHz of the cpu-clock perf events on every online CPU (default 97).
	FrequencyHz int
	// ReadCap bounds the record bytes read in the kernel (default 640,
	// at most MaxReadCap, at least the 28-byte header).
	ReadCap int
	// OffCPU also captures the record of a publishing thread when it is
	// switched out (sched_switch), for off-CPU profiles.
	OffCPU bool
	// RingBufferSize in bytes (power of two, default 1 MiB).
	RingBufferSize int
	// Follow captures at the samples of a profiler's BPF programs instead
	// of (or besides) our own ticks (follow.go). Zero: no following.
	Follow FollowOptions
	// PrctlHook chooses the prctl hook: PrctlHookAuto (""), the
	// syscalls:sys_exit_prctl tracepoint if it attaches, else the
	// raw_tracepoint/sys_exit; PrctlHookRawTracepoint forces the latter.
	PrctlHook PrctlHook
	// MaxProcesses sizes the pid → recipe map: the publishers tracked at
	// once (default MaxTracked).
	MaxProcesses int
}

// PrctlHook is where the prctl hook is attached (Options.PrctlHook,
// Stats.PrctlHook).
type PrctlHook string

// Prctl hooks.
const (
	PrctlHookAuto PrctlHook = ""
	// PrctlHookTracepoint: tracepoint/syscalls/sys_exit_prctl, run on prctl
	// exits only. Needs tracefs mounted (/sys/kernel/tracing or
	// /sys/kernel/debug/tracing), CONFIG_FTRACE_SYSCALLS and
	// bpf_task_pt_regs (5.15).
	PrctlHookTracepoint PrctlHook = "tracepoint"
	// PrctlHookRawTracepoint: raw_tracepoint/sys_exit, run on every
	// syscall exit (it filters on the number).
	PrctlHookRawTracepoint PrctlHook = "raw_tracepoint"
)

// Source is where a sample's context was read.
type Source uint8

// Sources.
const (
	// SourceOTEP4947: the thread's otel_thread_ctx_v1 record (Sample.Record).
	SourceOTEP4947 Source = iota
	// SourceDD: the thread's slot of a DD_OTEL_CTX ring buffer (Sample.DD).
	SourceDD
)

func (s Source) String() string {
	switch s {
	case SourceOTEP4947:
		return "otep4947"
	case SourceDD:
		return "dd_otel_ctx"
	}
	return "source(" + strconv.Itoa(int(s)) + ")"
}

// Sample is one context seen in the kernel. A process tracked with both
// sources gives two samples per capture, one of each.
type Sample struct {
	PID, TID int
	// BootNs is CLOCK_BOOTTIME when the sample was taken; Time is it as
	// wall-clock time.
	BootNs uint64
	Time   time.Time
	// OffCPU marks a sample taken at a context switch rather than a tick.
	OffCPU bool
	// Followed marks a sample taken at a followed profiler program's
	// sample (same interrupt, same thread), not at one of our own ticks.
	Followed bool
	Source   Source
	// Record is the raw record bytes (header + attrs, at most ReadCap), to
	// be parsed with threadctx.Parse; nil when the slot held NULL, and for
	// SourceDD.
	Record []byte
	// NotAllocated: the variable lives in dynamic TLS and this thread's
	// block does not exist yet (it never touched the module), so there is
	// no record either (Record is nil).
	NotAllocated bool
	// DD is the slot of TID (SourceDD), read with in_use 0 before and after
	// two identical reads of its fields. The slot is TID % capacity: it is
	// TID's own only if no other thread of the process maps to it
	// (ddotel.Colliding), which the kernel cannot know.
	DD ddotel.Slot
	// SlotTID (SourceDD) is the TID the kernel indexed the slot with: the
	// sampled thread's TID in its process's PID namespace (what the
	// writer's gettid() returned; TID itself is the initial namespace's),
	// so DD's slot is SlotTID % capacity.
	SlotTID int
	// DDNotResident (SourceDD): the kernel could not read the slot's page.
	// Usually a page no thread ever wrote (the slot is empty), but also a
	// page swapped out or made inaccessible for a moment by NUMA balancing:
	// so it says nothing about the thread's context (DD is zero).
	DDNotResident bool
}

// Stats are cumulative counters of the kernel side.
type Stats struct {
	Samples  uint64 // ticks that found a thread of a tracked process
	Emitted  uint64 // records written to the ring buffer
	Dropped  uint64 // records lost because the samples ring buffer was full
	Failures uint64 // reads that faulted (unmapped slot or record)
	Prctl    uint64 // prctl(PR_SET_VMA, …, "OTEL_CTX"/"DD_OTEL_CTX") exits reported
	// PrctlDropped: prctl events lost because their ring buffer was full.
	PrctlDropped uint64
	// PrctlHook is the hook the prctl program is attached to (constant
	// for a Sampler).
	PrctlHook PrctlHook
	// Stale: ticks on a tracked PID whose process started at another time
	// than the tracked one (the PID was reused): not read.
	Stale uint64
	// DDBusy: DD slots whose in_use was set before the fields were read
	// (the thread was interrupted in a write): not emitted.
	DDBusy uint64
	// DDTorn: DD slots whose in_use was set after the fields were read, or
	// whose fields changed between two reads (a colliding thread wrote):
	// not emitted.
	DDTorn uint64
	// DDHeader: DD reads refused because the buffer's header no longer
	// describes the tracked buffer (the process exec'ed, or a hostile
	// one rewrote it): not read.
	DDHeader uint64
	// ProfilerSamples: samples of followed profiler programs seen in the
	// kernel, on any thread.
	ProfilerSamples uint64
	// Followed: of Samples, the captures taken at a followed program's
	// sample (the rest are own ticks and, with OffCPU, context switches).
	Followed uint64
}

// Sample flags (FLAG_* in sampler.bpf.c).
const (
	flagOffCPU       = 1
	flagNull         = 2
	flagNotAllocated = 4
	flagDD           = 8
	flagFollowed     = 16
)

// Counter indexes (C_* in sampler.bpf.c).
const (
	cSamples = iota
	cEmitted
	cDropped
	cFailures
	cPrctl
	cStale
	cDDBusy
	cDDTorn
	cDDHeader
	cProfiler
	cFollowed
	cPrctlDropped
	cNum
)

// ddFieldsSize is the slot bytes a DD event carries (struct dd_event).
const ddFieldsSize = 24

// Placements in the recipe (PLACEMENT_* in sampler.bpf.c).
const (
	placementStatic  = 1
	placementDynamic = 2
)

// eventHeaderSize is offsetof(struct sample_event, data).
const eventHeaderSize = 24

// Sampler is a loaded and attached BPF sampler.
type Sampler struct {
	// mu guards the kernel objects against Close: Track, Untrack and Stats
	// hold it shared, Close exclusively, so no call uses a closed (and
	// possibly reused) file descriptor.
	mu      sync.RWMutex
	closed  bool
	running bool

	coll      *ebpf.Collection
	recipes   *ebpf.Map
	counters  *ebpf.Map
	links     []link.Link
	prctlHook PrctlHook
	prctlProg *ebpf.Program // on_prctl_exit, loaded on its own (nil: not used)
	ticks     ownTicks      // on_tick's perf events; opened and closed by policy
	follow    *follower
	samples   *ringbuf.Reader
	prctl     *ringbuf.Reader
	done      chan struct{}
	readersWG sync.WaitGroup // Run's reader goroutines

	clockMu sync.Mutex
	offset  int64 // CLOCK_REALTIME - CLOCK_BOOTTIME, ns
}

// Stats reads the kernel-side counters (summed over CPUs).
func (s *Sampler) Stats() (Stats, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return Stats{}, errClosed
	}
	var sums [cNum]uint64
	var per []uint64
	for i := range sums {
		if err := s.counters.Lookup(uint32(i), &per); err != nil {
			return Stats{}, fmt.Errorf("sampler: reading counter %d: %w", i, err)
		}
		for _, v := range per {
			sums[i] += v
		}
	}
	return Stats{
		Samples:  sums[cSamples],
		Emitted:  sums[cEmitted],
		Dropped:  sums[cDropped],
		Failures: sums[cFailures],
		Prctl:    sums[cPrctl],
		Stale:    sums[cStale],
		DDBusy:   sums[cDDBusy],
		DDTorn:   sums[cDDTorn],
		DDHeader: sums[cDDHeader],

		ProfilerSamples: sums[cProfiler],
		Followed:        sums[cFollowed],
		PrctlDropped:    sums[cPrctlDropped],
		PrctlHook:       s.prctlHook,
	}, nil
}

// Close detaches every link, closes every perf event fd and map, and makes
// Run return. It waits for Run's reader goroutines; calling it again does
// nothing.
func (s *Sampler) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	// The program watcher takes mu to open or close own ticks: stop it
	// outside mu, then release what it attached.
	ferr := s.stopFollowing()
	s.mu.Lock()
	// Closing the readers interrupts their ReadInto; release closes them
	// first thing after the links, so the readers exit promptly.
	err := s.release()
	s.mu.Unlock()
	s.readersWG.Wait()
	return errors.Join(ferr, err)
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

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

	"github.com/otelctx/otelctx/internal/format/ddotel"
)

// ErrUnavailable: the kernel refused to load or attach (no BPF, no BTF, no
// privileges). Wrapped with the reason; callers fall back to ptrace.
var ErrUnavailable = errors.New("eBPF sampler unavailable")

const (
	DefaultFrequencyHz    = 97
	DefaultReadCap        = 640 // threadctx.DefaultReadCap
	DefaultRingBufferSize = 1 << 20
	// MaxReadCap is MAX_READ in sampler.bpf.c.
	MaxReadCap = 1024
	MaxTracked = 4096
	headerSize = 28
	// DefaultPrctlWindow is discovery's default MinRescanInterval: a process
	// named again sooner is polled at its end anyway.
	DefaultPrctlWindow = 250 * time.Millisecond
)

// Options: zero values take the defaults.
type Options struct {
	FrequencyHz int
	ReadCap     int
	// OffCPU also captures at sched_switch, for off-CPU profiles.
	OffCPU         bool
	RingBufferSize int
	// Follow: capture at a profiler's samples (follow.go). Zero: no following.
	Follow FollowOptions
	// PrctlHook: "" tries the sys_exit_prctl tracepoint, else the raw sys_exit.
	PrctlHook PrctlHook
	// MaxProcesses: publishers tracked at once.
	MaxProcesses int
	// PrctlWindow: the kernel sends a process's first prctl event, and one
	// more within PrctlWindow of it (user space polls the process at the
	// window's end); the rest are counted (Stats.PrctlLimited). The
	// watcher passes its MinRescanInterval.
	PrctlWindow time.Duration
}

type PrctlHook string

const (
	PrctlHookAuto PrctlHook = ""
	// PrctlHookTracepoint runs on prctl exits only; needs tracefs,
	// CONFIG_FTRACE_SYSCALLS and bpf_task_pt_regs (5.15).
	PrctlHookTracepoint PrctlHook = "tracepoint"
	// PrctlHookRawTracepoint runs on every syscall exit and filters.
	PrctlHookRawTracepoint PrctlHook = "raw_tracepoint"
)

type Source uint8

const (
	SourceOTEP4947 Source = iota
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

// Sample is one context seen in the kernel; a process tracked with both
// sources gives one sample of each per capture.
type Sample struct {
	PID, TID int
	// BootNs is CLOCK_BOOTTIME; Time is it as wall-clock time.
	BootNs uint64
	Time   time.Time
	OffCPU bool
	// Followed: taken at a followed program's sample, same interrupt and thread.
	Followed bool
	Source   Source
	// Record is the raw record (at most ReadCap); nil for a NULL slot and SourceDD.
	Record []byte
	// NotAllocated: the thread never touched the module's dynamic TLS.
	NotAllocated bool
	// DD was read with in_use 0 around two identical reads; whether the slot is
	// TID's own (ddotel.Colliding) the kernel cannot know.
	DD ddotel.Slot
	// SlotTID indexed the slot: the TID in the process's PID namespace.
	SlotTID int
	// DDNotResident: the slot's page could not be read (never written, swapped,
	// or NUMA balancing): it says nothing about the context.
	DDNotResident bool
}

type Stats struct {
	Samples      uint64 // ticks that found a thread of a tracked process
	Emitted      uint64 // records written to the ring buffer
	Dropped      uint64 // records lost because the samples ring buffer was full
	Failures     uint64 // reads that faulted (unmapped slot or record)
	Prctl        uint64 // prctl(PR_SET_VMA, …, "OTEL_CTX"/"DD_OTEL_CTX") exits reported
	PrctlDropped uint64
	// PrctlLimited: prctl events not sent, their process having sent two
	// within Options.PrctlWindow.
	PrctlLimited uint64
	PrctlHook    PrctlHook
	// Stale: the PID was reused (another start time): not read.
	Stale uint64
	// DDBusy: in_use set before the fields were read (a write interrupted).
	DDBusy uint64
	// DDTorn: in_use set after, or fields changed between reads (a colliding write).
	DDTorn uint64
	// DDHeader: the header no longer describes the buffer (exec, or hostile).
	DDHeader uint64
	// ProfilerSamples: followed programs' samples on any thread.
	ProfilerSamples uint64
	// Followed: of Samples, those taken at a followed program's sample.
	Followed uint64
	// Node*: nodejs_v1_dev walks that did not check out (nodectx's reasons
	// bad pointer, bad table, chain too long): nothing emitted.
	NodeBadPointer, NodeBadTable, NodeLongChain uint64
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
	cNodeBadPointer
	cNodeBadTable
	cNodeLongChain
	cPrctlLimited
	cNum
)

// ddFieldsSize is the slot bytes a DD event carries (struct dd_event).
const ddFieldsSize = 24

// Placements in the recipe (PLACEMENT_* in sampler.bpf.c).
const (
	placementStatic  = 1
	placementDynamic = 2
)

// walkNode: the variable is nodejs_v1_dev's (WALK_NODE in sampler.bpf.c).
const walkNode = 1

// eventHeaderSize is offsetof(struct sample_event, data).
const eventHeaderSize = 24

type Sampler struct {
	// mu: Track, Untrack and Stats hold it shared, Close exclusively, so no
	// call uses a closed (and possibly reused) fd.
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

	// ringsMu orders the prctl reader's AvailableBytes (no lock of its own
	// in cilium/ebpf) before release unmaps the rings.
	ringsMu     sync.RWMutex
	ringsClosed bool

	clockMu sync.Mutex
	offset  int64 // CLOCK_REALTIME - CLOCK_BOOTTIME, ns
}

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
		PrctlLimited:    sums[cPrctlLimited],
		NodeBadPointer:  sums[cNodeBadPointer],
		NodeBadTable:    sums[cNodeBadTable],
		NodeLongChain:   sums[cNodeLongChain],
		PrctlHook:       s.prctlHook,
	}, nil
}

// Close makes Run return and waits for its readers; calling it again does nothing.
func (s *Sampler) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	// The watcher takes mu to open or close own ticks: stop it outside mu.
	ferr := s.stopFollowing()
	s.mu.Lock()
	// Closing the readers right after the links interrupts their ReadInto.
	err := s.release()
	s.mu.Unlock()
	s.readersWG.Wait()
	return errors.Join(ferr, err)
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package sampler reads thread contexts from inside the kernel: a BPF
// program on the sampled thread reads its thread variable's record and/or
// its slot of a buffer, as its process's schemas say (schema.Sampler: an
// OTEP 4947 record, a Node.js walk, a DD_OTEL_CTX slot), and hands them to
// user space through a ring buffer; another reports prctl calls that name
// a process context. The BPF side is sampler.bpf.c (bpf2go objects committed, `make
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
	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring"
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

// Read says which of its target's reads a sample is.
type Read uint8

const (
	// ReadVariable: the thread variable's record (Target.Thread): Record.
	ReadVariable Read = iota
	// ReadBufferSlot: the thread's slot of the buffer (Target.Buffer): Slot.
	ReadBufferSlot
)

func (r Read) String() string {
	switch r {
	case ReadVariable:
		return "variable"
	case ReadBufferSlot:
		return "buffer slot"
	}
	return "read(" + strconv.Itoa(int(r)) + ")"
}

// Sample is one context seen in the kernel; a process tracked with both a
// variable and a buffer gives one sample of each per capture.
type Sample struct {
	PID, TID int
	// BootNs is CLOCK_BOOTTIME; Time is it as wall-clock time.
	BootNs uint64
	Time   time.Time
	OffCPU bool
	// Followed: taken at a followed program's sample, same interrupt and thread.
	Followed bool
	// Read says which of the target's reads this is; the target's schema
	// for it (Target.Thread's, Target.Buffer's) says what was read.
	Read Read
	// Record is the raw record (at most ReadCap); nil for a NULL slot and ReadBufferSlot.
	Record []byte
	// NotAllocated: the thread never touched the module's dynamic TLS.
	NotAllocated bool
	// Slot (ReadBufferSlot, schema.ReadDDSlot) was read with in_use 0
	// around two identical reads; whether the slot is TID's own
	// (ddotel.Colliding) the kernel cannot know.
	Slot ddotel.Slot
	// SlotTID indexed the slot: the TID in the process's PID namespace.
	SlotTID int
	// SlotNotResident: the slot's page could not be read (never written,
	// swapped, or NUMA balancing): it says nothing about the context.
	SlotNotResident bool
}

// Refusal is why the kernel refused a read and emitted nothing: the
// schema read it was (schema.Schema.Sampler) and a reason, a fixed string
// the thread source's telemetry uses as its label value.
type Refusal struct {
	Read   schema.SamplerRead
	Reason string
}

// refusals are the kernel's counters of refused reads.
var refusals = [...]struct {
	counter int
	Refusal
}{
	{cDDBusy, Refusal{schema.ReadDDSlot, ddring.RefusedBusy}},
	{cDDTorn, Refusal{schema.ReadDDSlot, ddring.RefusedTorn}},
	{cDDHeader, Refusal{schema.ReadDDSlot, ddring.RefusedHeader}},
	{cNodeBadPointer, Refusal{schema.ReadNodeWalk, nodectx.ReasonBadPointer}},
	{cNodeBadTable, Refusal{schema.ReadNodeWalk, nodectx.ReasonBadTable}},
	{cNodeLongChain, Refusal{schema.ReadNodeWalk, nodectx.ReasonLongChain}},
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
	// ProfilerSamples: followed programs' samples on any thread.
	ProfilerSamples uint64
	// Followed: of Samples, those taken at a followed program's sample.
	Followed uint64
	// Refused counts the reads the kernel refused, by their schema read
	// and reason (every one the program knows, zero included): a DD slot
	// being written (busy), changed between its reads (torn) or behind a
	// header no longer the buffer's (header, an exec); a Node.js walk that
	// did not check out (nodectx's reasons).
	Refused map[Refusal]uint64
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
	refused := make(map[Refusal]uint64, len(refusals))
	for _, r := range refusals {
		refused[r.Refusal] = sums[r.counter]
	}
	return Stats{
		Samples:  sums[cSamples],
		Emitted:  sums[cEmitted],
		Dropped:  sums[cDropped],
		Failures: sums[cFailures],
		Prctl:    sums[cPrctl],
		Stale:    sums[cStale],

		ProfilerSamples: sums[cProfiler],
		Followed:        sums[cFollowed],
		PrctlDropped:    sums[cPrctlDropped],
		PrctlLimited:    sums[cPrctlLimited],
		Refused:         refused,
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

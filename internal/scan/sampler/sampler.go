// Package sampler reads thread contexts from inside the kernel: a BPF
// program on software cpu-clock perf events runs on the sampled thread and
// reads, per the tracked process's recipe, its OTEP 4947 record (thread
// pointer from task_struct, the TLS slot, the record) and/or its slot of a
// Datadog DD_OTEL_CTX ring buffer (ddotel), and hands {pid, tid, boot-time
// ns, bytes} to user space through a ring buffer. A tracked PID's threads
// are only read while the PID belongs to the process the recipe was made
// for (same start time). A second program on the exit of
// prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, …, "OTEL_CTX" or "DD_OTEL_CTX")
// reports PIDs that just published or updated a process context.
//
// The BPF side is sampler.bpf.c (compiled by bpf2go into the committed
// sampler_{x86,arm64}_bpfel.{go,o}; `make generate` rebuilds them). See
// README.md for the maps, the event format and the kernel requirements.
package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/cpulist"
	"github.com/otelctx/otelctx/internal/scan/ddotel"
	"github.com/otelctx/otelctx/internal/scan/procstat"
	"github.com/otelctx/otelctx/internal/scan/tlsvar"
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

// New loads the programs and attaches them to every online CPU. It returns
// ErrUnavailable (wrapped) when the kernel does not allow it.
func New(opts Options) (*Sampler, error) {
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
	switch {
	case opts.MaxProcesses < 0 || opts.MaxProcesses > 1<<20:
		return nil, fmt.Errorf("sampler: MaxProcesses %d outside [1, %d]", opts.MaxProcesses, 1<<20)
	case opts.FrequencyHz < 0:
		return nil, fmt.Errorf("sampler: FrequencyHz %d < 0", opts.FrequencyHz)
	case opts.ReadCap < headerSize || opts.ReadCap > MaxReadCap:
		return nil, fmt.Errorf("sampler: ReadCap %d outside [%d, %d]", opts.ReadCap, headerSize, MaxReadCap)
	case opts.RingBufferSize < os.Getpagesize() || opts.RingBufferSize&(opts.RingBufferSize-1) != 0:
		return nil, fmt.Errorf("sampler: RingBufferSize %d is not a power of two ≥ the page size", opts.RingBufferSize)
	case opts.PrctlHook != PrctlHookAuto && opts.PrctlHook != PrctlHookRawTracepoint:
		return nil, fmt.Errorf("sampler: PrctlHook %q is neither auto (\"\") nor %q", opts.PrctlHook, PrctlHookRawTracepoint)
	}
	cpus, err := cpulist.Online()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}

	// Kernels ≥ 5.11 charge BPF memory to the cgroup and ignore
	// RLIMIT_MEMLOCK; RemoveMemlock then does nothing. On older kernels it
	// raises the limit, which needs CAP_SYS_RESOURCE: EPERM is left for the
	// load to report if the limit really was the problem.
	if err := rlimit.RemoveMemlock(); err != nil && !errors.Is(err, unix.EPERM) {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}

	spec, err := loadSampler()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	spec.Maps[samplerMapSamples].MaxEntries = uint32(opts.RingBufferSize)
	spec.Maps[samplerMapRecipes].MaxEntries = uint32(opts.MaxProcesses)
	if err := spec.Variables[samplerVarReadCap].Set(uint32(opts.ReadCap)); err != nil {
		return nil, fmt.Errorf("sampler: setting read_cap: %w", err)
	}
	bootOffset, err := timensBootOffset("/proc/self/timens_offsets")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := spec.Variables[samplerVarBootOffsetNs].Set(bootOffset); err != nil {
		return nil, fmt.Errorf("sampler: setting boot_offset_ns: %w", err)
	}
	fopts, err := opts.Follow.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(fopts.Programs) > 0 {
		if err := spec.Variables[samplerVarSweventHrtimerFn].Set(swEventHrtimerAddr("/proc/kallsyms")); err != nil {
			return nil, fmt.Errorf("sampler: setting swevent_hrtimer_fn: %w", err)
		}
	}
	// The follow programs are loaded on their own (follow.go), against this
	// collection's maps: their targets are only known later.
	followSpec := spec.Copy()
	delete(spec.Programs, samplerProgOnProfilerTimer)
	delete(spec.Programs, samplerProgOnProfilerEntry)
	// Loaded on its own (attachPrctl): a kernel without bpf_task_pt_regs
	// refuses it, which must not fail the collection.
	delete(spec.Programs, samplerProgOnPrctlExit)
	if !opts.OffCPU {
		// Not loaded at all: a tp_btf program needs its target resolved in
		// the kernel's BTF, which should not be a requirement when unused.
		delete(spec.Programs, samplerProgOnSwitch)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
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
	if err := s.attach(coll, followSpec, opts); err != nil {
		s.release()
		return nil, err
	}
	// The readers come before following: release does not stop the
	// follower's goroutine nor detach what it attached, so nothing may fail
	// after startFollowing succeeded.
	if s.samples, err = newRingReader(coll.Maps[samplerMapSamples]); err == nil {
		s.prctl, err = newRingReader(coll.Maps[samplerMapPrctlEvents])
	}
	if err != nil {
		s.release()
		return nil, fmt.Errorf("%w: ring buffer reader: %w", ErrUnavailable, err)
	}
	if err := s.startFollowing(followSpec, fopts); err != nil {
		s.release()
		return nil, err
	}
	s.refreshClock()
	return s, nil
}

// newRingReader is ringbuf.NewReader (a variable so that a test can make
// it fail).
var newRingReader = ringbuf.NewReader

// attach links the tracepoint programs, and on_tick to its perf events
// unless the follow policy says otherwise (startFollowing decides then).
// What is attached is recorded in s as it goes, so that release undoes a
// partial attach.
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

// attachPrctlTracepoint loads on_prctl_exit against the collection's maps
// and attaches it to syscalls:sys_exit_prctl. It fails without tracefs (the
// tracepoint's ID is read there), without syscall tracepoints, or on a
// kernel without bpf_task_pt_regs (< 5.15): the caller falls back to the
// raw tracepoint. The program is kept in s.prctlProg for release.
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
	l, err := link.Tracepoint("syscalls", "sys_exit_prctl", prog, nil)
	if err != nil {
		prog.Close()
		return nil, err
	}
	s.prctlProg = prog
	return l, nil
}

// release closes every kernel object: links first (the programs stop
// running), then perf events, readers and the collection.
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
	for _, rd := range []*ringbuf.Reader{s.samples, s.prctl} {
		if rd != nil {
			errs = append(errs, rd.Close())
		}
	}
	if s.coll != nil {
		s.coll.Close()
		s.coll = nil
	}
	return errors.Join(errs...)
}

// timensBootOffset reads the boottime offset of this process's time
// namespace: /proc shows start times shifted by it (timens_add_boottime_ns
// in fs/proc/array.c uses the reader's namespace), the kernel's
// start_boottime is not. No file (no CONFIG_TIME_NS) or no boottime line:
// offset 0, as in the initial time namespace.
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
		// "boottime <seconds> <nanoseconds>" ("boottime" or its clock id 7).
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

// Target is what the kernel reads of one process: its OTEP 4947 variable,
// its DD_OTEL_CTX buffer, or both.
type Target struct {
	PID int
	// StartTicks is the process's start time, /proc/PID/stat field 22
	// (scan.ProcessID.StartTicks): threads of a process that reused the PID
	// (another start time) are not read (Stats.Stale).
	StartTicks uint64
	// TLS locates otel_thread_ctx_v1 (nil: none).
	TLS *tlsvar.Location
	// DD is the process's DD_OTEL_CTX ring buffer (nil: none).
	DD *ddotel.Buffer
}

// recipeFor encodes t as the BPF map value, with the checks
// tlsvar.Location.SlotAddr and ddotel.ParseHeader make before reading.
func recipeFor(t Target) (samplerRecipe, error) {
	var r samplerRecipe
	if t.TLS == nil && t.DD == nil {
		return r, errors.New("sampler: nothing to read (no TLS location, no DD buffer)")
	}
	r.StartTicks = t.StartTicks
	if t.DD != nil {
		if t.DD.Capacity == 0 || t.DD.Capacity > ddotel.MaxCapacity || t.DD.Addr == 0 {
			return r, fmt.Errorf("sampler: bad DD buffer (addr %#x, capacity %d)", t.DD.Addr, t.DD.Capacity)
		}
		r.DdAddr = t.DD.Addr
		r.DdCapacity = t.DD.Capacity
	}
	if t.TLS == nil {
		return r, nil
	}
	if err := encodeTLS(&r, t.TLS); err != nil {
		return samplerRecipe{}, err
	}
	return r, nil
}

// encodeTLS fills r's OTEP 4947 part from loc.
func encodeTLS(r *samplerRecipe, loc *tlsvar.Location) error {
	var want tlsvar.Arch
	switch runtime.GOARCH {
	case "amd64":
		want = tlsvar.AMD64
	case "arm64":
		want = tlsvar.ARM64
	}
	if loc.Arch != want {
		return fmt.Errorf("sampler: location is for %s, the kernel program reads %s threads", loc.Arch, runtime.GOARCH)
	}
	switch loc.Placement {
	case tlsvar.StaticTLS:
		r.Placement = placementStatic
		r.TpOffset = loc.TPOffset
	case tlsvar.DynamicTLS:
		if loc.ModuleID == 0 || loc.ModuleID > 1<<16 || loc.DTVEntrySize == 0 {
			return fmt.Errorf("sampler: bad dynamic location (module %d, entry %d)", loc.ModuleID, loc.DTVEntrySize)
		}
		r.Placement = placementDynamic
		r.SymOffset = loc.SymOffset
		r.ModuleId = loc.ModuleID
		r.DtvPtrOffset = loc.DTVPointerOffset
		r.DtvEntrySize = loc.DTVEntrySize
		r.DtvCountOffset = loc.DTVCountOffset
		r.DtvUnallocated = loc.DTVUnallocated
	default:
		return fmt.Errorf("sampler: location has no placement")
	}
	return nil
}

var errClosed = errors.New("sampler: closed")

// TrackTarget makes the sampler read threads of t.PID per t (replacing any
// previous recipe of the PID) while the PID belongs to the process that
// started at t.StartTicks; Untrack stops it. Threads of untracked
// processes cost one map lookup per tick. With a DD buffer, the process's
// PID namespace (/proc/PID/ns/pid) is read now and put in the recipe: the
// kernel indexes the slot with the sampled thread's TID in it.
func (s *Sampler) TrackTarget(t Target) error {
	r, err := recipeFor(t)
	if err != nil {
		return err
	}
	if t.PID <= 0 {
		return fmt.Errorf("sampler: bad pid %d", t.PID)
	}
	if t.DD != nil {
		dev, ino, err := ddotel.PIDNamespace("/proc", t.PID)
		if err != nil {
			return fmt.Errorf("sampler: tracking %d: %w", t.PID, err)
		}
		r.PidnsDev, r.PidnsIno = kernelDev(dev), ino
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errClosed
	}
	if err := s.recipes.Update(uint32(t.PID), &r, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("sampler: tracking %d: %w", t.PID, err)
	}
	return nil
}

// Track is TrackTarget for pid's OTEP 4947 variable at loc, for the
// process that holds pid now: its start time is read from /proc/PID/stat
// at the call. Callers that resolved loc earlier and know the identity
// they resolved it for (scan.ProcessID) should use TrackTarget with it.
func (s *Sampler) Track(pid int, loc *tlsvar.Location) error {
	ticks, err := procstat.StartTicks("/proc", pid)
	if err != nil {
		return fmt.Errorf("sampler: tracking %d: %w", pid, err)
	}
	return s.TrackTarget(Target{PID: pid, StartTicks: ticks, TLS: loc})
}

// kernelDev turns a stat st_dev (the user-space encoding) into the kernel's
// dev_t (major << 20 | minor), what bpf_get_ns_current_pid_tgid compares
// with nsfs's device.
func kernelDev(dev uint64) uint64 {
	return uint64(unix.Major(dev))<<20 | uint64(unix.Minor(dev))
}

// Untrack stops reading pid's threads. Untracking a pid that is not
// tracked is not an error (the process may have been untracked already).
func (s *Sampler) Untrack(pid int) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errClosed
	}
	if err := s.recipes.Delete(uint32(pid)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("sampler: untracking %d: %w", pid, err)
	}
	return nil
}

// item is what a reader goroutine hands to Run's goroutine.
type item struct {
	sample Sample
	prctl  int // > 0: a prctl event
}

// clockRefresh is how often Run re-reads the boot → wall offset: it moves
// when the wall clock is stepped (NTP, settimeofday) or slewed.
const clockRefresh = 5 * time.Second

// Run delivers samples and prctl PIDs to the callbacks until Close; it
// returns when the sampler is closed. Callbacks run on Run's goroutine.
// Either callback may be nil. Only one Run may be active at a time.
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
	// Readers are registered under mu, so Close (which takes mu) waits for
	// exactly the goroutines started here.
	items := make(chan item, 256)
	errc := make(chan error, 2)
	stop := make(chan struct{})
	s.samples.SetDeadline(time.Time{}) // a failed earlier Run set one
	s.prctl.SetDeadline(time.Time{})
	s.readersWG.Add(2)
	go s.read(s.samples, items, errc, stop, s.decodeSample)
	go s.read(s.prctl, items, errc, stop, decodePrctl)
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
			// A reader failed for another reason than Close: stop the
			// other one too and report it. Flush wakes a blocked ReadInto
			// without the reader's lock (SetDeadline takes that lock,
			// which the blocked ReadInto holds: it would wait forever).
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

// read decodes records of one ring buffer into items until the reader is
// closed (or interrupted by a deadline).
func (s *Sampler) read(rd *ringbuf.Reader, items chan<- item, errc chan<- error, stop <-chan struct{}, decode func([]byte) (item, bool)) {
	defer s.readersWG.Done()
	var rec ringbuf.Record
	for {
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

// decodeSample parses struct sample_event; Record is copied out of the
// reader's buffer, which ReadInto reuses.
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
		// struct dd_event: the three u64 fields as the writer stored them.
		if n != ddFieldsSize {
			return item{}, false
		}
		smp.Source = SourceDD
		smp.SlotTID = int(ne.Uint32(b[20:]))
		smp.DD = ddotel.Slot{TraceIDHigh: ne.Uint64(data), TraceIDLow: ne.Uint64(data[8:]), SpanID: ne.Uint64(data[16:])}
		smp.DDNotResident = flags&flagNull != 0
		return item{sample: smp}, true
	}
	smp.NotAllocated = flags&flagNotAllocated != 0
	if n > 0 {
		smp.Record = append([]byte(nil), data...)
	}
	return item{sample: smp}, true
}

// decodePrctl parses struct prctl_event.
func decodePrctl(b []byte) (item, bool) {
	if len(b) < 16 {
		return item{}, false
	}
	pid := int(binary.NativeEndian.Uint32(b[0:]))
	return item{prctl: pid}, pid > 0
}

// refreshClock measures CLOCK_REALTIME - CLOCK_BOOTTIME, reading the boot
// clock between two wall-clock reads and taking their midpoint, so that a
// preemption between the reads costs at most half its length.
func (s *Sampler) refreshClock() {
	var r1, b, r2 unix.Timespec
	if unix.ClockGettime(unix.CLOCK_REALTIME, &r1) != nil ||
		unix.ClockGettime(unix.CLOCK_BOOTTIME, &b) != nil ||
		unix.ClockGettime(unix.CLOCK_REALTIME, &r2) != nil {
		return
	}
	mid := r1.Nano() + (r2.Nano()-r1.Nano())/2
	s.clockMu.Lock()
	s.offset = mid - b.Nano()
	s.clockMu.Unlock()
}

func (s *Sampler) wallTime(bootNs uint64) time.Time {
	s.clockMu.Lock()
	off := s.offset
	s.clockMu.Unlock()
	return time.Unix(0, int64(bootNs)+off)
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

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package lockup hammers the window in which a follower attaches a BPF
// trampoline (fentry) to a profiler's program while the profiler is still
// setting it up: loading it, filling the program array it tail-calls
// through (each update rewrites the program's JITed tail-call jumps) and
// opening its perf events. Once, a node running the OTel eBPF profiler and
// the collector locked up both CPUs in that window (Linux 6.1 under QEMU):
// the raw attacher's hammer reproduces it under QEMU's multi-threaded TCG
// only, a vCPU running a stale int3 of code another one patched (6.1 hangs,
// 6.12 oopses; docs/compatibility.md). It runs in test/vm's guests, where
// the kernel allows fentry; a hang times the guest out (or panics it) and
// fails TestVM.
package lockup

import (
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/proc/cpulist"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/threads/sampler"
)

// GuestEnv is set by test/vm's guests; ForEnv overrides the duration.
const (
	GuestEnv = "OTELCTX_VM_GUEST"
	ForEnv   = "OTELCTX_LOCKUP_FOR"
	// NoAttachEnv=1 runs the owner alone (the control).
	NoAttachEnv = "OTELCTX_LOCKUP_NOATTACH"
)

const entryName = "hammer_entry"

// TestTrampolineAttachDuringSetup: an owner loads a perf_event program
// that tail-calls through a program array (as the profiler's
// native_tracer_entry does into its unwinders, which tail-call each
// other), rewrites the array, opens perf events on every CPU and closes
// everything, in a loop; meanwhile a raw attacher attaches and detaches
// fentry programs to each new program as fast as it can, before and while
// it samples, and the sampler's follower (rescanning every 5 ms) follows
// it. The raw attacher ignores the follower's guard: before Linux 6.12 it
// is the hang (not in make test; OTELCTX_VM_LOCKUP=1).
func TestTrampolineAttachDuringSetup(t *testing.T) {
	if os.Getenv(NoAttachEnv) != "" {
		// The control: the same owner rounds, no trampoline.
		d := duration(t, 15*time.Second)
		var h hammer
		for deadline := time.Now().Add(d); time.Now().Before(deadline); {
			if err := h.ownerRound(); err != nil {
				t.Fatal(err)
			}
			t.Logf("control round done")
		}
		return
	}
	hammerWindow(t, duration(t, 15*time.Second), true)
}

// TestFollowerDuringSetup: the same owner with the sampler's follower
// alone, what a node runs: it follows each new tail-calling program as
// soon as it sees it, during its set-up, with the hrtimer method before
// Linux 6.12 (never fentry: the hang) and with fentry from 6.12 on. A hang
// times the guest out and fails TestVM.
func TestFollowerDuringSetup(t *testing.T) {
	hammerWindow(t, duration(t, 10*time.Second), false)
}

func duration(t *testing.T, d time.Duration) time.Duration {
	if os.Getenv(GuestEnv) == "" {
		// make test runs this package only in test/vm's guests.
		testenv.Missing(t, "not in a test/vm guest: this package runs in test/vm's VMs, where the kernel allows fentry (make test-vm)")
	}
	if v, err := time.ParseDuration(os.Getenv(ForEnv)); err == nil {
		return v
	}
	return d
}

// hammerWindow runs owner rounds for d (the round under way at d ends)
// with the follower and, if raw, the raw attacher.
func hammerWindow(t *testing.T, d time.Duration, raw bool) {
	var methods sync.Map // method (and why not fentry) -> true, of every followed entry program
	s, err := sampler.New(sampler.Options{Follow: sampler.FollowOptions{
		Programs: []string{entryName}, OwnTicks: sampler.OwnTicksUnlessFollowing, Rescan: 5 * time.Millisecond,
		OnChange: func(st sampler.FollowStatus) {
			for _, p := range st.Programs {
				methods.Store(p.Method+" "+p.NoFentry, true)
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.FollowStatus(); st.Method != sampler.MethodFentry {
		t.Fatalf("following with %q, not fentry: %+v", st.Method, st)
	}
	var h hammer
	if raw {
		h.logf = t.Logf
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if raw {
			h.attachLoop(t, done)
		}
	}()
	start := time.Now()
	rounds := 0
	for time.Since(start) < d {
		if err := h.ownerRound(); err != nil {
			t.Errorf("owner round %d: %v", rounds, err)
			break
		}
		rounds++
		t.Logf("round %d at %v: %d trampolines attached during set-up, %d while sampling, %d attach errors",
			rounds, time.Since(start).Round(time.Millisecond), h.early.Load(), h.late.Load(), h.errs.Load())
	}
	close(done)
	wg.Wait()
	st, _ := s.Stats()
	t.Logf("%v: %d owner rounds, %d trampolines attached before the perf events opened, %d while sampling, %d attach errors; sampler: %d followed samples",
		time.Since(start).Round(time.Millisecond), rounds, h.early.Load(), h.late.Load(), h.errs.Load(), st.Followed)
	var followedBy []string
	methods.Range(func(k, _ any) bool { followedBy = append(followedBy, k.(string)); return true })
	for _, m := range followedBy {
		t.Logf("followed by: %s", m)
	}
	if raw {
		if h.early.Load() == 0 {
			t.Errorf("no trampoline attached in the set-up window: the test hammered nothing")
		}
		return
	}
	if len(followedBy) == 0 {
		t.Errorf("the follower followed no entry program: the test hammered nothing")
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(uts.Release[:])
	major, minor, ok := sampler.ParseKernelRelease(release)
	fixed := ok && (major > 6 || major == 6 && minor >= 12)
	byFentry := false
	for _, m := range followedBy {
		method, why, _ := strings.Cut(m, " ")
		byFentry = byFentry || method == sampler.MethodFentry
		switch {
		case !fixed && (method == sampler.MethodFentry || why == ""):
			t.Errorf("Linux %s: a tail-calling program followed by %q: fentry must not be used before 6.12", release, m)
		case fixed && why != "":
			t.Errorf("Linux %s: a tail-calling program followed by %q: fentry skipped where the tail-call counter is fixed", release, m)
		}
	}
	// From 6.12 fentry follows them; one quiet for a while (its owner
	// closed its perf events) then moves to the hrtimer method, which holds
	// nothing, without a reason.
	if fixed && !byFentry {
		t.Errorf("Linux %s: no tail-calling program followed by fentry (%v)", release, followedBy)
	}
}

type hammer struct {
	sampling          atomic.Bool // the current owner round's perf events are open
	early, late, errs atomic.Int64
	// logf, if set, logs where the round's programs were JITed (the
	// kernel's symbols of them), to name the addresses of a hang.
	logf func(format string, args ...any)
}

// jitSymbols returns the kernel's symbols of the hammer's programs
// (/proc/kallsyms, with kptr_restrict=0).
func jitSymbols() string {
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "hammer_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}

func fn(name string) *btf.Func {
	return &btf.Func{Name: name, Linkage: btf.GlobalFunc, Type: &btf.FuncProto{
		Return: &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed},
		Params: []btf.FuncParam{{Name: "ctx", Type: &btf.Pointer{Target: &btf.Struct{Name: "bpf_perf_event_data"}}}},
	}}
}

// tailCaller tail-calls slot 0 of arr (r1 is still ctx), then returns 0.
func tailCaller(name string, arr *ebpf.Map) (*ebpf.Program, error) {
	insns := asm.Instructions{
		asm.LoadMapPtr(asm.R2, arr.FD()),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnTailCall.Call(),
		asm.Mov.Imm(asm.R0, 0),
		asm.Return(),
	}
	insns[0] = btf.WithFuncMetadata(insns[0], fn(name))
	return ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.PerfEvent, License: "GPL", Instructions: insns})
}

// ownerRound: load, rewrite the array, sample briefly, close.
func (h *hammer) ownerRound() error {
	arr, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 4})
	if err != nil {
		return err
	}
	defer arr.Close()
	tail, err := tailCaller("hammer_tail", arr) // tail-calls itself through slot 0: a bounded chain
	if err != nil {
		return err
	}
	defer tail.Close()
	entry, err := tailCaller(entryName, arr)
	if err != nil {
		return err
	}
	defer entry.Close()
	rewrite := func(n int) error {
		for i := 0; i < n; i++ {
			if err := arr.Put(uint32(0), tail); err != nil {
				return err
			}
			if err := arr.Delete(uint32(0)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return err
			}
		}
		return arr.Put(uint32(0), tail)
	}
	if h.logf != nil {
		h.logf("JITed: %s", jitSymbols())
	}
	if err := rewrite(200); err != nil {
		return err
	}
	cpus, err := cpulist.Online()
	if err != nil {
		return err
	}
	var fds []int
	var links []link.Link
	defer func() {
		h.sampling.Store(false)
		for _, l := range links {
			l.Close()
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, cpu := range cpus {
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Sample: 997, Bits: unix.PerfBitFreq}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return err
		}
		fds = append(fds, fd)
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: entry, Attach: ebpf.AttachPerfEvent})
		if err != nil {
			return err
		}
		links = append(links, l)
	}
	h.sampling.Store(true)
	return rewrite(200)
}

// attachLoop attaches and detaches an fentry program to every program
// named entryName it finds, as fast as it can.
func (h *hammer) attachLoop(t *testing.T, done chan struct{}) {
	var last ebpf.ProgramID
	for {
		select {
		case <-done:
			return
		default:
		}
		id, err := ebpf.ProgramGetNextID(last)
		if err != nil {
			last = 0 // wrapped: scan from the start
			continue
		}
		last = id
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		if info, err := p.Info(); err == nil && info.Name == entryName {
			h.attach(p)
		}
		p.Close()
	}
}

func (h *hammer) attach(target *ebpf.Program) {
	for i := 0; i < 20; i++ {
		early := !h.sampling.Load()
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry,
			AttachTarget: target, AttachTo: entryName, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		if err != nil {
			h.errs.Add(1)
			return
		}
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			h.errs.Add(1)
			p.Close()
			return
		}
		if early {
			h.early.Add(1)
		} else {
			h.late.Add(1)
		}
		l.Close()
		p.Close()
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

func TestFentryLoopsTailCalls(t *testing.T) {
	for _, tc := range []struct {
		release string
		loops   bool // with a program array; never without
	}{
		{"6.1.0-47-cloud-amd64", true},
		{"5.10.0-32-amd64", true},
		{"6.6.58", true},
		{"6.7.0", true},
		{"6.11.11-300.fc41.x86_64", true},
		{"6.12.0", false},
		{"6.12.9-amd64", false},
		{"6.18.44-fc-v782", false},
		{"7.0.0", false},
		{"10.1", false},
		{"4.19", true},
		{"6.12", false},
		{"6.12-rc1", false},
		{" 6.13.0\n", false},
		{"", true},
		{"6", true},
		{"six.one", true},
		{"6.x.1", true},
		{"-6.13", true},
	} {
		if got := fentryLoopsTailCalls(tc.release, true); got != tc.loops {
			t.Errorf("fentryLoopsTailCalls(%q, prog array) = %v, want %v", tc.release, got, tc.loops)
		}
		if fentryLoopsTailCalls(tc.release, false) {
			t.Errorf("fentryLoopsTailCalls(%q, no prog array) = true", tc.release)
		}
	}
}

const tailCallerName = "tc_follow_entry"

// loadTailCaller loads a perf_event program with BTF (so fentry could
// target it) that tail-calls through a program array, as the OTel eBPF
// profiler's native_tracer_entry does.
func loadTailCaller(t *testing.T) *ebpf.Program {
	t.Helper()
	arr, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		testenv.Missing(t, "program array: "+err.Error())
	}
	defer arr.Close() // the program holds it
	insns := asm.Instructions{
		asm.LoadMapPtr(asm.R2, arr.FD()),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnTailCall.Call(),
		asm.Mov.Imm(asm.R0, 0),
		asm.Return(),
	}
	insns[0] = btf.WithFuncMetadata(insns[0], &btf.Func{Name: tailCallerName, Linkage: btf.GlobalFunc, Type: &btf.FuncProto{
		Return: &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed},
		Params: []btf.FuncParam{{Name: "ctx", Type: &btf.Pointer{Target: &btf.Struct{Name: "bpf_perf_event_data"}}}},
	}})
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: tailCallerName, Type: ebpf.PerfEvent, License: "GPL", Instructions: insns})
	if err != nil {
		testenv.Missing(t, "loading a tail-calling program: "+err.Error())
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func progID(t *testing.T, p *ebpf.Program) ebpf.ProgramID {
	t.Helper()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("no program ID")
	}
	return id
}

// The program-array detection on real loaded programs: the tail caller has
// one, the stand-in profiler (a ring buffer) and the sampler's own tick
// program do not.
func TestUsesProgArray(t *testing.T) {
	testenv.RequireRoot(t)
	prof, err := fakeprof.Load(fakeprof.DefaultName)
	if err != nil {
		testenv.Missing(t, "fake profiler: "+err.Error())
	}
	defer prof.Close()
	s := newSampler(t, Options{})
	for _, tc := range []struct {
		name string
		prog *ebpf.Program
		want bool
	}{
		{"tail caller", loadTailCaller(t), true},
		{"own tick program", s.coll.Programs[samplerProgOnTick], false},
	} {
		info, err := tc.prog.Info()
		if err != nil {
			t.Fatal(err)
		}
		if got := usesProgArray(info); got != tc.want {
			t.Errorf("%s: usesProgArray = %v, want %v", tc.name, got, tc.want)
		}
	}
	p, err := ebpf.NewProgramFromID(prof.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	if usesProgArray(info) {
		t.Errorf("stand-in profiler: usesProgArray = true, want false")
	}
}

// The follower's choice on a real tail-calling program, as if the kernel
// allowed fentry (this machine refuses it, so fentry is turned back on by
// hand and the release is set): before 6.12 it is followed with the
// hrtimer method and says why, or, without that method, not followed and
// the status says why; from 6.12 fentry is tried.
func TestFollowTailCallerWithoutFentry(t *testing.T) {
	testenv.RequireRoot(t)
	s, _ := startSampler(t, Options{Follow: FollowOptions{
		Programs: []string{tailCallerName},
		OwnTicks: OwnTicksUnlessFollowing,
		Rescan:   time.Hour, // the test rescans itself
	}})
	f := s.follow
	if f == nil || f.timer == nil {
		testenv.Missing(t, "the hrtimer method: "+errString(s.FollowStatus().Err))
	}
	f.kernel = "6.1.0-47-cloud-amd64"

	timer := f.timer
	f.fentryErr, f.timer = nil, nil
	id := progID(t, loadTailCaller(t))
	_ = f.rescan()
	f.timer = timer
	st := s.FollowStatus()
	if follows(st, id) || st.Err == nil || !strings.Contains(st.Err.Error(), errTailCallLoop.Error()) {
		t.Fatalf("without the hrtimer method: status %+v, want program %d not followed and why", st, id)
	}

	f.fentryErr = nil
	id = progID(t, loadTailCaller(t))
	_ = f.rescan()
	fp := f.progs[id]
	if fp == nil || fp.Method != MethodHrtimer || fp.NoFentry != errTailCallLoop.Error() || fp.link != nil {
		t.Fatalf("kernel %s: followed %+v, want the hrtimer method and why", f.kernel, fp)
	}
	if st := s.FollowStatus(); !strings.Contains(st.Programs[len(st.Programs)-1].NoFentry, "tail-calls") {
		t.Errorf("status %+v does not say why fentry was skipped", st)
	}

	f.fentryErr, f.kernel = nil, "6.12.0"
	id = progID(t, loadTailCaller(t))
	_ = f.rescan()
	fp = f.progs[id]
	if fp == nil || fp.NoFentry != "" {
		t.Fatalf("kernel %s: followed %+v, want fentry tried", f.kernel, fp)
	}
	if fp.Method == MethodHrtimer && f.fentryErr == nil {
		t.Errorf("kernel %s: hrtimer method, but fentry was not tried", f.kernel)
	}
	t.Logf("kernel %s: %s (fentry: %v)", f.kernel, fp.Method, f.fentryErr)
}

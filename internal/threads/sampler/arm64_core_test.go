// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// arm64KernelTypes is a synthetic kernel BTF with the arm64 shapes of the
// types the program reads: thread_struct.uw is a member of an anonymous
// struct type and pt_regs.regs sits in an anonymous struct inside an
// anonymous union, as in arch/arm64. Offsets are arbitrary but distinctive,
// so the test can find them in the relocated program.
func arm64KernelTypes(t *testing.T) *btf.Spec {
	t.Helper()
	ulong := &btf.Int{Name: "long unsigned int", Size: 8}
	u64 := &btf.Int{Name: "long long unsigned int", Size: 8}
	s32 := &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	regs31 := &btf.Array{Index: s32, Type: u64, Nelems: 31}
	cpuContext := &btf.Struct{Name: "cpu_context", Size: 104, Members: []btf.Member{{Name: "x19", Type: ulong}}}
	uw := &btf.Struct{Size: 16, Members: []btf.Member{
		{Name: "tp_value", Type: ulong, Offset: 0},
		{Name: "tp2_value", Type: ulong, Offset: 64},
	}}
	thread := &btf.Struct{Name: "thread_struct", Size: 120, Members: []btf.Member{
		{Name: "cpu_context", Type: cpuContext, Offset: 0},
		{Name: "uw", Type: uw, Offset: 104 * 8},
	}}
	task := &btf.Struct{Name: "task_struct", Size: 8192}
	task.Members = []btf.Member{
		{Name: "pid", Type: s32, Offset: 2000 * 8},
		{Name: "tgid", Type: s32, Offset: 2004 * 8},
		{Name: "group_leader", Type: &btf.Pointer{Target: task}, Offset: 2040 * 8},
		{Name: "start_boottime", Type: u64, Offset: 2064 * 8},
		{Name: "thread", Type: thread, Offset: 4096 * 8},
	}
	userPtRegs := &btf.Struct{Name: "user_pt_regs", Size: 272, Members: []btf.Member{
		{Name: "regs", Type: regs31},
		{Name: "sp", Type: u64, Offset: 248 * 8},
		{Name: "pc", Type: u64, Offset: 256 * 8},
		{Name: "pstate", Type: u64, Offset: 264 * 8},
	}}
	anonRegs := &btf.Struct{Size: 272, Members: []btf.Member{
		{Name: "regs", Type: regs31},
		{Name: "sp", Type: u64, Offset: 248 * 8},
		{Name: "pc", Type: u64, Offset: 256 * 8},
		{Name: "pstate", Type: u64, Offset: 264 * 8},
	}}
	union := &btf.Union{Size: 272, Members: []btf.Member{
		{Name: "user_regs", Type: userPtRegs},
		{Name: "", Type: anonRegs},
	}}
	ptRegs := &btf.Struct{Name: "pt_regs", Size: 336, Members: []btf.Member{
		{Name: "", Type: union},
		{Name: "orig_x0", Type: u64, Offset: 272 * 8},
		{Name: "syscallno", Type: s32, Offset: 280 * 8},
	}}
	b, err := btf.NewBuilder([]btf.Type{task, ptRegs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := b.Spec()
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestARM64ObjectRelocates loads the committed arm64 object (BPF bytecode
// is the same on every architecture) into this kernel with CO-RE resolved
// against arm64-shaped types: every relocation must resolve (a failed one
// is poisoned and the verifier rejects the program) to the arm64 offsets.
// arm64 is otherwise only cross-compiled here.
func TestARM64ObjectRelocates(t *testing.T) {
	testenv.RequireRoot(t)
	spec, err := ebpf.LoadCollectionSpec("sampler_arm64_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	delete(spec.Programs, samplerProgOnSwitch) // tp_btf needs the real kernel's sched_switch
	// The follow programs touch no arch-specific field; fentry also needs a
	// target program, and the timer program the real kernel's perf types.
	delete(spec.Programs, samplerProgOnProfilerEntry)
	delete(spec.Programs, samplerProgOnProfilerTimer)
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Programs: ebpf.ProgramOptions{KernelTypes: arm64KernelTypes(t)},
	})
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		t.Fatalf("arm64 object against arm64 types: %+v", ve)
	}
	if err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			testenv.Missing(t, err.Error())
		}
		t.Fatal(err)
	}
	defer coll.Close()

	// The constants the relocations produced, in the kernel's view of the
	// loaded programs.
	want := map[string][]int64{
		samplerProgOnTick:    {4096 + 104, 2040, 2064}, // thread.uw.tp_value, group_leader, start_boottime
		samplerProgOnSysExit: {280, 272, 8},            // syscallno, orig_x0, regs[1]
	}
	for name, offs := range want {
		info, err := coll.Programs[name].Info()
		if err != nil {
			t.Fatal(err)
		}
		insns, err := info.Instructions()
		if err != nil {
			testenv.Missing(t, "reading back translated instructions: "+err.Error())
		}
		seen := map[int64]bool{}
		for _, ins := range insns {
			if ins.OpCode.ALUOp() == asm.Add || ins.OpCode.Class().IsLoad() || ins.OpCode.Class() == asm.ALU64Class {
				seen[ins.Constant] = true
			}
			seen[int64(ins.Offset)] = true
		}
		for _, off := range offs {
			if !seen[off] {
				t.Errorf("%s: no instruction uses the arm64 offset %d", name, off)
			}
		}
	}
}

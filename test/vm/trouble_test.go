// SPDX-License-Identifier: Apache-2.0

//go:build linux

package vm

import (
	"strings"
	"testing"
	"time"
)

// A soft lockup or RCU stall without BPF on the stack is a starved vCPU
// (logged); with a BPF frame, or in the strict lock-up hunt, it is a
// failure, as are an oops, a BUG and a warning.
func TestKernelTrouble(t *testing.T) {
	starved := []string{
		"watchdog: BUG: soft lockup - CPU#0 stuck for 30s! [sampler.test:212]",
		"CPU: 0 PID: 212 Comm: sampler.test Not tainted 6.1.0-47-cloud-arm64 #1",
		"Call trace:",
		" __flush_tlb_range+0x40/0x80",
		" shift_arg_pages+0x1a0/0x1d0",
		" load_elf_binary+0x3c4/0x1248",
		"rcu: INFO: rcu_sched self-detected stall on CPU",
		" do_idle+0x1f0/0x290",
	}
	bpfStall := []string{
		"rcu: INFO: rcu_sched self-detected stall on CPU",
		"Call Trace:",
		" bpf_prog_3b185187f1855c4c_sample+0x1c/0x4b0",
		" bpf_overflow_handler+0x8c/0x150",
	}
	oops := []string{"BUG: kernel NULL pointer dereference, address: 0000000000000008", "Oops: 0000 [#1] SMP NOPTI"}
	for _, tc := range []struct {
		name        string
		console     []string
		strict      bool
		wantTrouble string // a line the trouble must contain, "" for none
		wantStalls  int
	}{
		{"starved vCPU", starved, false, "", 2},
		{"starved vCPU, lock-up hunt", starved, true, "soft lockup", 2},
		{"stall in BPF", bpfStall, false, "bpf_prog_", 0},
		{"oops", oops, false, "NULL pointer", 0},
		{"quiet", []string{"Run /init as init process"}, false, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Boot{Console: tc.console}
			trouble := strings.Join(b.KernelTrouble(tc.strict), "\n")
			if tc.wantTrouble == "" && trouble != "" || !strings.Contains(trouble, tc.wantTrouble) {
				t.Errorf("trouble %q, want it to contain %q", trouble, tc.wantTrouble)
			}
			if got := len(b.Stalls()); got != tc.wantStalls {
				t.Errorf("%d stalls, want %d", got, tc.wantStalls)
			}
		})
	}
}

// The time scale is the guest's slowdown, at least 1, at most MaxTimeScale.
func TestTimeScale(t *testing.T) {
	ref := 100 * time.Millisecond
	for _, tc := range []struct {
		measured time.Duration
		ref      time.Duration
		want     float64
	}{
		{50 * time.Millisecond, ref, 1},
		{100 * time.Millisecond, ref, 1},
		{241 * time.Millisecond, ref, 2.5},
		{10 * time.Second, ref, MaxTimeScale},
		{time.Second, 0, 1},
	} {
		if got := TimeScale(tc.measured, tc.ref); got != tc.want {
			t.Errorf("TimeScale(%v, %v) = %v, want %v", tc.measured, tc.ref, got, tc.want)
		}
	}
}

// The host follows guestinit's deadlines: a run line sets the run's scaled
// timeout, its exit line the step's.
func TestReadDeadlines(t *testing.T) {
	console := strings.Join([]string{
		Marker + "kernel 6.1.0 x86_64",
		Marker + "run sampler 720 2.0 260",
		Marker + "out sampler \x16=== RUN   TestX",
		Marker + "exit sampler 0 12.5",
		Marker + "done",
	}, "\n")
	var got []time.Duration
	b := &Boot{}
	b.read(strings.NewReader(console), time.Now(), nil, func(d time.Duration) { got = append(got, d) })
	if len(got) != 2 || got[0] != 720*time.Second || got[1] != 0 {
		t.Errorf("deadlines %v, want [12m0s 0s]", got)
	}
	if !b.Done || !b.TestStarted || len(b.Runs) != 1 || b.Runs[0].Scale != 2 || b.Runs[0].CalibrationMs != 260 {
		t.Errorf("boot %+v, run %+v", b, b.Runs[0])
	}
}

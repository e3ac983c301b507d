//go:build linux

package vm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// DirEnv names the directory `make vm-deps` filled: ARCH/vmlinuz and
// ARCH/busybox for each GOARCH.
const DirEnv = "OTELCTX_VM_DIR"

// cmdline: no_timer_check, as for any VM (on a busy host the emulated
// IO-APIC timer check can fail and panic the boot); a soft lockup panics
// (the VM stops at once, the stacks of every CPU on the console) and a
// panic powers off (-no-reboot); nokaslr keeps kernel addresses (the
// registers printed at a timeout) those of /proc/kallsyms on every boot.
const cmdline = "nokaslr no_timer_check panic=-1 loglevel=5 softlockup_panic=1 softlockup_all_cpu_backtrace=1"

// vmTimeout bounds one VM run (boot, every test, power-off).
const vmTimeout = 9 * time.Minute

// guestTest is a package's tests to run in the VMs.
type guestTest struct {
	name, pkg string
	run       string // -test.run
	skip      string // -test.skip
	arches    []string
}

// OnlyEnv=NAME=REGEXP runs only the guest package NAME's tests matching
// REGEXP (while working on one test).
const OnlyEnv = "OTELCTX_VM_ONLY"

func guestTests() []guestTest {
	if only := os.Getenv(OnlyEnv); only != "" {
		name, re, _ := strings.Cut(only, "=")
		for _, g := range allGuestTests() {
			if g.name == name {
				g.run = re
				return []guestTest{g}
			}
		}
		return nil
	}
	return allGuestTests()
}

func allGuestTests() []guestTest {
	full := os.Getenv(FullEnv) != ""
	arm64Sampler := "TestSamplesCarryPublishedRecord|TestOffCPU|TestFollowFentry|TestFollowHrtimer|TestARM64ObjectRelocates|TestFollowCost"
	arm64Conformance := "TestEBPFExecutableCells"
	arm64PtraceSkip := "^TestEachThreadStopsEveryThread$"
	// With fentry it missed every capture of a 1 s span right after the
	// status said followed, in 2 of 5 runs (an open issue of following).
	amd64SamplerSkip := "^TestFollowOnlyFollowedAndTracked$"
	if full {
		arm64PtraceSkip, amd64SamplerSkip = "", ""
		arm64Sampler = samplerTests
		arm64Conformance = conformanceTests
	}
	tests := []guestTest{
		{name: "sampler", pkg: "internal/threads/sampler", run: "^(" + samplerTests + ")$", skip: amd64SamplerSkip, arches: []string{"amd64"}},
		{name: "sampler", pkg: "internal/threads/sampler", run: "^(" + arm64Sampler + ")$", arches: []string{"arm64"}},
		{name: "ptrace", pkg: "internal/threads/ptrace", run: ".", arches: []string{"amd64"}},
		// TestEachThreadStopsEveryThread: on the loaded emulated arm64 a
		// thread sometimes misses its stop timeout (OTELCTX_VM_FULL runs it).
		{name: "ptrace", pkg: "internal/threads/ptrace", run: ".", skip: arm64PtraceSkip, arches: []string{"arm64"}},
		// auto follows with fentry and says so.
		{name: "watcher", pkg: "internal/watcher", run: "^(TestThreadSamplerAutoSaysMethod|TestThreadSamplerFollowLogged)$"},
		{name: "conformance", pkg: "test/conformance", run: "^(" + conformanceTests + ")$", arches: []string{"amd64"}},
		{name: "conformance", pkg: "test/conformance", run: "^(" + arm64Conformance + ")$", arches: []string{"arm64"}},
	}
	if full {
		// The precision of following under load (4 hogs, 997 Hz): about
		// 100 s under TCG on amd64, over twice that on arm64.
		tests = append(tests, guestTest{name: "enrich", pkg: "test/enrich", run: "^TestEnrichFollowing$"})
	}
	return tests
}

// LockupEnv=1 adds the trampoline hammer's boot (2 vCPUs; see
// test/vm/lockup): not in make test, the guest hung in it (see
// docs/compatibility.md).
const LockupEnv = "OTELCTX_VM_LOCKUP"

// FullEnv=1 runs every guest test on both architectures (about 10 minutes
// more): make test runs a subset on arm64, to stay in its time budget.
const FullEnv = "OTELCTX_VM_FULL"

// Own ticks, prctl hook kinds, off-CPU; following with fentry and with the
// hrtimer (TestFollowHrtimer follows by the method the kernel allows), a
// restart, a silent profiler, release on failure.
const samplerTests = "TestSamplesCarryPublishedRecord|TestPrctlHookKinds|TestPrctlHook|TestOffCPU|TestUntrackedProcessesAreNotSampled|" +
	"TestFollowFentry|TestFollowHrtimer|TestFollowRestart|TestFollowOnlyFollowedAndTracked|TestFollowPausedProfilerRetried|" +
	"TestNewFailureReleasesFollowing|TestFollowUnseenEventsLetGo|TestFollowCloseReleases|TestCloseReleasesEverything|TestARM64ObjectRelocates|TestFollowCost|" +
	"TestUsesProgArray|TestFollowTailCallerWithoutFentry"

// The TLS cells the reader resolves and reads, by ptrace and by eBPF.
const conformanceTests = "TestPtraceMatrix|TestPtraceRefusedVariants|TestEBPFExecutableCells"

func vmDir(t *testing.T) string {
	dir := os.Getenv(DirEnv)
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "_build", "vm")
	}
	if _, err := os.Stat(dir); err != nil {
		testenv.Missing(t, "no VM kernels ("+DirEnv+" unset and "+dir+" missing: make vm-deps fetches them)")
	}
	return dir
}

// vmRun is one boot: a machine, its vCPUs, the tests it runs.
type vmRun struct {
	name  string
	m     Machine
	smp   int
	tests []guestTest
}

func vmRuns() []vmRun {
	var runs []vmRun
	for _, m := range Machines {
		var tests []guestTest
		for _, g := range guestTests() {
			if len(g.arches) == 0 || contains(g.arches, m.GOARCH) {
				tests = append(tests, g)
			}
		}
		if len(tests) > 0 {
			runs = append(runs, vmRun{name: m.GOARCH, m: m, smp: 1, tests: tests})
		}
	}
	// Two vCPUs, each on a host thread: the trampoline hammer (a lock-up
	// seen once involved both CPUs).
	if os.Getenv(LockupEnv) != "" || strings.HasPrefix(os.Getenv(OnlyEnv), "lockup=") {
		lockup := guestTest{name: "lockup", pkg: "test/vm/lockup", run: "."}
		if re, ok := strings.CutPrefix(os.Getenv(OnlyEnv), "lockup="); ok {
			lockup.run = re
		}
		runs = append(runs, vmRun{name: "amd64-smp2", m: Machines[0], smp: 2, tests: []guestTest{lockup}})
	}
	return runs
}

// TestVM boots each architecture's kernel and runs the guest tests there.
func TestVM(t *testing.T) {
	dir := vmDir(t)
	for _, r := range vmRuns() {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			runMachine(t, r, dir)
		})
	}
}

func runMachine(t *testing.T, r vmRun, dir string) {
	m := r.m
	kernel := filepath.Join(dir, m.GOARCH, "vmlinuz")
	busybox := filepath.Join(dir, m.GOARCH, "busybox")
	for _, f := range []string{kernel, busybox} {
		if _, err := os.Stat(f); err != nil {
			testenv.Missing(t, f+" missing (make vm-deps fetches it)")
		}
	}
	testenv.RequireTool(t, m.Qemu)
	im := NewImage(m.GOARCH, t.TempDir())
	if err := im.AddInit(busybox); err != nil {
		t.Fatal(err)
	}
	fx := BuildFixtures(t, m.GOARCH, dir)
	if err := im.AddTree(fx); err != nil {
		t.Fatal(err)
	}
	im.AddLibs(Toolchains(m.GOARCH).Libs)
	// Tests read the test publishers' C sources and headers at run time.
	for _, pub := range []string{"testpub", "threadpub", "ddwriter"} {
		if err := im.AddTree(filepath.Join(im.Root, "internal", "testutil", pub, "testdata")); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range r.tests {
		args := []string{"-test.run=" + g.run, "-test.timeout=8m"}
		if g.skip != "" {
			args = append(args, "-test.skip="+g.skip)
		}
		if err := im.AddTest(g.name, g.pkg, args...); err != nil {
			t.Fatal(err)
		}
	}
	im.Plan.Env = []string{"CI=true", testpub.PrebuiltEnv + "=" + fx, "OTELCTX_VM_GUEST=1"}
	for _, k := range []string{"OTELCTX_LOCKUP_FOR", "OTELCTX_LOCKUP_NOATTACH", "OTELCTX_LOCKUP_FOLLOWER_ONLY"} {
		if v := os.Getenv(k); v != "" {
			im.Plan.Env = append(im.Plan.Env, k+"="+v)
		}
	}
	// Debian's kernels default to 3 (a Debian patch: no perf_event_open
	// without CAP_SYS_ADMIN, whatever CAP_PERFMON allows); upstream's 2.
	im.Plan.Sysctl = []string{"kernel/perf_event_paranoid=2"}
	initrd, err := im.Write()
	if err != nil {
		t.Fatal(err)
	}
	timeout := vmTimeout
	if d, err := time.ParseDuration(os.Getenv("OTELCTX_LOCKUP_FOR")); err == nil {
		timeout = d + 4*time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	boot := m.Run(ctx, kernel, initrd, cmdline, r.smp, nil)
	report(t, boot)
}

func report(t *testing.T, boot *Boot) {
	results := map[string][]*TestResult{}
	for _, ro := range boot.Runs {
		rs, outside, err := Results(ro)
		if err != nil {
			t.Errorf("%s: %v", ro, err)
		}
		results[ro.Name] = rs
		t.Run(ro.Name, func(t *testing.T) {
			for _, r := range rs {
				t.Run(r.Name, func(t *testing.T) { reportTest(t, r) })
			}
			if ro.Code != 0 {
				t.Errorf("%s, outside the tests:\n%s", ro, strings.Join(outside, "\n"))
			}
		})
	}
	t.Log(boot.Summary(results))
	if trouble := boot.KernelTrouble(); len(trouble) > 0 {
		t.Errorf("kernel console:\n%s", strings.Join(trouble, "\n"))
	}
	if !boot.Done {
		tail := boot.Console[max(0, len(boot.Console)-60):]
		t.Errorf("the guest did not finish its plan (qemu: %v); console tail:\n%s", boot.Err, strings.Join(tail, "\n"))
		if boot.Registers != "" {
			t.Errorf("vCPU registers at the timeout:\n%s", boot.Registers)
		}
	}
}

func reportTest(t *testing.T, r *TestResult) {
	out := strings.Join(r.Output, "\n")
	switch r.Action {
	case "pass":
		t.Logf("guest (%.2fs):\n%s", r.Elapsed, out)
	case "skip":
		t.Skipf("guest skipped (%.2fs):\n%s", r.Elapsed, out)
	case "fail":
		t.Errorf("guest failed (%.2fs; failed subtests %v):\n%s", r.Elapsed, r.Failed, out)
	default:
		t.Errorf("guest test never finished:\n%s", out)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

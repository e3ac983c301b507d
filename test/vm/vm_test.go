package vm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testenv"
)

// DirEnv names the directory `make vm-deps` filled: ARCH/vmlinuz and
// ARCH/busybox for each GOARCH.
const DirEnv = "OTELCTX_VM_DIR"

// cmdline: a soft lockup panics (the VM stops at once, the stacks of
// every CPU on the console) and a panic powers off (-no-reboot).
const cmdline = "panic=-1 loglevel=5 softlockup_panic=1 softlockup_all_cpu_backtrace=1"

// vmTimeout bounds one VM run (boot, every test, power-off).
const vmTimeout = 9 * time.Minute

// guestTest is a package's tests to run in the VMs.
type guestTest struct {
	name, pkg string
	run       string // -test.run
	arches    []string
}

func guestTests() []guestTest {
	return []guestTest{
		{name: "sampler", pkg: "internal/scan/sampler",
			run: "^(TestMatchesAny|TestSwEventHrtimerAddr|TestFollowCloseReleases|TestARM64ObjectRelocates)$"},
	}
}

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

// TestVM boots each architecture's kernel and runs the guest tests there.
func TestVM(t *testing.T) {
	dir := vmDir(t)
	for _, m := range Machines {
		t.Run(m.GOARCH, func(t *testing.T) {
			t.Parallel()
			runMachine(t, m, dir)
		})
	}
}

func runMachine(t *testing.T, m Machine, dir string) {
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
	for _, g := range guestTests() {
		if len(g.arches) > 0 && !contains(g.arches, m.GOARCH) {
			continue
		}
		if err := im.AddTest(g.name, g.pkg, "-test.run="+g.run, "-test.timeout=8m"); err != nil {
			t.Fatal(err)
		}
	}
	im.Plan.Env = []string{"CI=true"}
	initrd, err := im.Write()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), vmTimeout)
	defer cancel()
	boot := m.Run(ctx, kernel, initrd, cmdline, 1, nil)
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

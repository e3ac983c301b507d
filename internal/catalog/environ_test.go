// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/otelenv"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan/envscan"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// envOf is what p's environment named: its resource, string values.
func envOf(p *publisher.Process) []otelenv.Attribute {
	var out []otelenv.Attribute
	for _, a := range p.Context.Resource.Attributes {
		out = append(out, otelenv.Attribute{Key: a.Key, Value: a.Value.Str})
	}
	return out
}

// enableEnvironment turns c's environment source on over root's tree, as
// its owner does.
func enableEnvironment(c *Catalog, root string, maxProcesses int) error {
	src, err := envscan.New(root)
	if err != nil {
		return err
	}
	c.EnableEnvironment(src, maxProcesses)
	return nil
}

const fakeBoot = 1_700_000_000

// fakeProcess lays out root/pid with a stat line started at ticks, an
// environ image and a cgroup file.
func fakeProcess(t *testing.T, root string, pid int, ticks uint64, environ, cgroup string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (svc) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, ticks)
	for name, content := range map[string]string{"stat": stat, "environ": environ, "cgroup": cgroup} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func fakeRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte(fmt.Sprintf("cpu  1 0 1 1 0 0 0 0 0 0\nbtime %d\n", fakeBoot)), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// at is the wall time ticks after the fake boot.
func at(ticks uint64) int64 {
	return time.Unix(fakeBoot, 0).Add(time.Duration(ticks) * 10 * time.Millisecond).UnixNano()
}

const podCgroup = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/" +
	"cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n"

func TestEnvironmentSource(t *testing.T) {
	root := fakeRoot(t)
	fakeProcess(t, root, 10, 500, "PATH=/bin\x00OTEL_SERVICE_NAME=cart\x00OTEL_RESOURCE_ATTRIBUTES=service.namespace=shop\x00", podCgroup)
	fakeProcess(t, root, 11, 500, "PATH=/bin\x00", "0::/\n")
	fakeProcess(t, root, 12, 500, "OTEL_RESOURCE_ATTRIBUTES=a=%zz\x00", "0::/\n")
	c := New()
	if p, how := c.ProcessFor(10, at(600), at(700), Claims{}); how != NoProcess || p != nil {
		t.Fatal("the environment source is off by default")
	}
	if err := enableEnvironment(c, root, 2); err != nil {
		t.Fatal(err)
	}

	p, how := c.ProcessFor(10, at(600), at(700), Claims{})
	if how != Found {
		t.Fatalf("named process: %v", how)
	}
	want := []otelenv.Attribute{{Key: "service.namespace", Value: "shop"}, {Key: "service.name", Value: "cart"}}
	if fmt.Sprint(envOf(p)) != fmt.Sprint(want) || p.ID != (publisher.ProcessID{PID: 10, StartTicks: 500}) || p.HasContext() {
		t.Fatalf("process %+v", p)
	}
	if p.Workload.PodUID != "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901" || p.Workload.ContainerID == "" {
		t.Fatalf("workload %+v", p.Workload)
	}
	if !p.CreationTime.Equal(time.Unix(0, at(500))) {
		t.Fatalf("creation %v", p.CreationTime)
	}
	// Data from before the process started is an earlier holder's.
	if _, how := c.ProcessFor(10, at(100), at(700), Claims{}); how != OtherHolder {
		t.Fatalf("data older than the process: %v", how)
	}
	// Read once per identity.
	if _, how := c.ProcessFor(10, at(650), at(650), Claims{}); how != Found || c.EnvStats().Reads != 1 {
		t.Fatalf("second lookup: %v, %+v", how, c.EnvStats())
	}
	// Neither variable, or an invalid one alone: nothing.
	for _, pid := range []int{11, 12} {
		if p, how := c.ProcessFor(pid, at(600), at(600), Claims{}); how != NoProcess || p != nil {
			t.Fatalf("pid %d: %v", pid, how)
		}
	}
	if s := c.EnvStats(); s.Named != 1 || s.Invalid != 1 || s.Reads != 3 || s.Evicted != 1 {
		t.Fatalf("stats %+v (bound 2: one entry evicted)", s)
	}

	// The PID changes hands: the new holder's environment, read anew.
	fakeProcess(t, root, 10, 900, "OTEL_SERVICE_NAME=other\x00", "0::/\n")
	p, how = c.ProcessFor(10, at(950), at(950), Claims{})
	if how != Found || envOf(p)[0].Value != "other" {
		t.Fatalf("after reuse: %v %+v", how, p)
	}
	// A process gone: nothing for data after its last check.
	if err := os.RemoveAll(filepath.Join(root, "10")); err != nil {
		t.Fatal(err)
	}
	if _, how := c.ProcessFor(10, at(950), time.Now().UnixNano(), Claims{}); how != NoProcess {
		t.Fatalf("gone: %v", how)
	}
}

// TestEnvironmentOfPublisher: a publisher's environment is read for its
// own identity only.
func TestEnvironmentOfPublisher(t *testing.T) {
	root := fakeRoot(t)
	fakeProcess(t, root, 20, 300, "OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=dev\x00", "0::/\n")
	c := New()
	if err := enableEnvironment(c, root, 0); err != nil {
		t.Fatal(err)
	}
	pub := &publisher.Process{ID: publisher.ProcessID{PID: 20, StartTicks: 300}, MappingAddr: 1}
	if env := c.Environment(pub); len(env) != 1 || env[0].Value.Str != "dev" {
		t.Fatalf("publisher's environment %v", env)
	}
	stale := &publisher.Process{ID: publisher.ProcessID{PID: 20, StartTicks: 299}, MappingAddr: 1}
	if env := c.Environment(stale); env != nil {
		t.Fatalf("an earlier holder got %v", env)
	}
}

// TestEnvironmentAfterExec: a process first read between fork and exec (a
// shell that then execs env(1), which execs the program with
// OTEL_SERVICE_NAME) gets its program's environment once the exec is seen,
// within envExecCheck; data from before is not given it.
func TestEnvironmentAfterExec(t *testing.T) {
	x := testenv.StartExecer(t, "PATH="+os.Getenv("PATH"))
	pid := x.Cmd.Process.Pid
	environ := fmt.Sprintf("/proc/%d/environ", pid)
	testenv.Eventually(t, "the shell's environment laid out", func() bool {
		b, err := os.ReadFile(environ)
		return err == nil && strings.HasPrefix(string(b), "PATH=")
	})

	c := New()
	if err := enableEnvironment(c, "/proc", 0); err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	c.env.Load().now = func() time.Time { return clock }
	first := clock.UnixNano()
	if p, how := c.ProcessFor(pid, first, first, Claims{}); how != NoProcess || p != nil {
		t.Fatalf("the shell names nothing: %v %+v", how, p)
	}

	x.Exec(t)
	testenv.Eventually(t, "the program exec'd with its environment", func() bool {
		b, err := os.ReadFile(environ)
		return err == nil && strings.Contains(string(b), "OTEL_SERVICE_NAME=after")
	})
	// Until the next look at its stat the entry read stands: one stat read
	// per period, not per lookup.
	clock = clock.Add(envExecCheck / 2)
	if _, how := c.ProcessFor(pid, clock.UnixNano(), clock.UnixNano(), Claims{}); how != NoProcess {
		t.Fatalf("before the exec check: %v", how)
	}
	clock = clock.Add(envExecCheck)
	now := clock.UnixNano()
	p, how := c.ProcessFor(pid, now, now, Claims{})
	if how != Found || len(envOf(p)) != 1 || envOf(p)[0] != (otelenv.Attribute{Key: "service.name", Value: "after"}) {
		t.Fatalf("after the exec: %v %+v", how, p)
	}
	if p.ID.PID != pid {
		t.Fatalf("process %+v", p.ID)
	}
	// Data from when the shell was last seen is not the program's.
	if _, how := c.ProcessFor(pid, first, now, Claims{}); how != OtherHolder {
		t.Fatalf("data of the image before the exec: %v", how)
	}
	if s := c.EnvStats(); s.Reads != 2 || s.Named != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// fakeStatArea rewrites root/pid/stat as a whole line whose environment
// area (fields 50 and 51) is [start, end).
func fakeStatArea(t *testing.T, root string, pid int, ticks, start, end uint64) {
	t.Helper()
	fields := make([]string, 52)
	for i := range fields {
		fields[i] = "0"
	}
	fields[0], fields[1], fields[2], fields[21] = strconv.Itoa(pid), "(svc)", "S", strconv.FormatUint(ticks, 10)
	fields[49], fields[50] = strconv.FormatUint(start, 10), strconv.FormatUint(end, 10)
	if err := os.WriteFile(filepath.Join(root, strconv.Itoa(pid), "stat"), []byte(strings.Join(fields, " ")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestEnvironmentAreaMovesRateLimited: a process that moves its
// environment area at every look (PR_SET_MM) costs at most one environment
// read per envExecCheck, however often data names it.
func TestEnvironmentAreaMovesRateLimited(t *testing.T) {
	root := fakeRoot(t)
	fakeProcess(t, root, 30, 500, "OTEL_SERVICE_NAME=mover\x00", "0::/\n")
	fakeStatArea(t, root, 30, 500, 1000, 1100)
	c := New()
	if err := enableEnvironment(c, root, 0); err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(0, at(600))
	c.env.Load().now = func() time.Time { return clock }
	const lookups = 100
	for i := range lookups {
		fakeStatArea(t, root, 30, 500, uint64(2000+i*16), uint64(2100+i*16))
		clock = clock.Add(envExecCheck / 20) // 100 lookups over 5 periods
		now := clock.UnixNano()
		if p, how := c.ProcessFor(30, now, now, Claims{}); how != Found || envOf(p)[0].Value != "mover" {
			t.Fatalf("lookup %d: %v %+v", i, how, p)
		}
	}
	// The first read, then one per period the area moved in.
	if reads := c.EnvStats().Reads; reads < 2 || reads > 1+lookups/20 {
		t.Fatalf("%d environment reads for %d lookups over %d periods of a moving area, want at most %d", reads, lookups, lookups/20, 1+lookups/20)
	}
}

// TestEnvironmentNotOfItself: otelctx's own environment configures it
// (the DaemonSet's OTEL_RESOURCE_ATTRIBUTES names the node for its
// telemetry) and does not name its own process.
func TestEnvironmentNotOfItself(t *testing.T) {
	root := fakeRoot(t)
	self := os.Getpid()
	fakeProcess(t, root, self, 500, "OTEL_RESOURCE_ATTRIBUTES=k8s.node.name=node-7\x00", "0::/\n")
	fakeProcess(t, root, self+1, 500, "OTEL_RESOURCE_ATTRIBUTES=k8s.node.name=node-7\x00", "0::/\n")
	c := New()
	if err := enableEnvironment(c, root, 0); err != nil {
		t.Fatal(err)
	}
	if p, how := c.ProcessFor(self, at(600), at(600), Claims{}); how != NoProcess || p != nil {
		t.Fatalf("otelctx named by its own environment: %v %+v", how, p)
	}
	if _, how := c.ProcessFor(self+1, at(600), at(600), Claims{}); how != Found {
		t.Fatalf("another process with the same environment: %v", how)
	}
}

// TestEnvironmentMemoryShared: one user's (UID 2000's) 64 processes naming
// 20 KiB of resource attributes each are looked up after another user's
// (UID 1000's) one: the entries stay within the memory bound, UID 2000
// giving up its own least recently confirmed ones, and UID 1000's entry
// stays cached (not read again). Before: no memory bound, and the oldest
// entry (UID 1000's) went first at the count bound. Eight users of one
// entry each still keep to a count bound of 4.
func TestEnvironmentMemoryShared(t *testing.T) {
	root := fakeRoot(t)
	big := "OTEL_RESOURCE_ATTRIBUTES="
	for i := range 20 {
		if i > 0 {
			big += ","
		}
		big += fmt.Sprintf("k%d=%s", i, strings.Repeat("v", 1000))
	}
	status := func(pid, uid int) {
		s := fmt.Sprintf("Name:\tsvc\nUmask:\t0022\nState:\tS\nTgid:\t%d\nNgid:\t0\nPid:\t%d\nPPid:\t1\nTracerPid:\t0\nUid:\t%d\t%d\t%d\t%d\n", pid, pid, uid, uid, uid, uid)
		if err := os.WriteFile(filepath.Join(root, strconv.Itoa(pid), "status"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fakeProcess(t, root, 10, 500, big+"\x00OTEL_SERVICE_NAME=victim\x00", "0::/\n")
	status(10, 1000)
	for i := range 64 {
		fakeProcess(t, root, 100+i, 500, big+"\x00", "0::/\n")
		status(100+i, 2000)
	}
	c := New()
	if err := enableEnvironment(c, root, 0); err != nil {
		t.Fatal(err)
	}
	if p, how := c.ProcessFor(10, at(600), at(700), Claims{}); how != Found || len(envOf(p)) != 21 {
		t.Fatalf("UID 1000's process: %v %+v", how, p)
	}
	cost := c.EnvStats().Memory
	bound := 8 * cost
	c.SetEnvironmentMemory(int(bound))
	for i := range 64 {
		if _, how := c.ProcessFor(100+i, at(600), at(700), Claims{}); how != Found {
			t.Fatalf("UID 2000's process %d: %v", 100+i, how)
		}
	}
	st := c.EnvStats()
	if st.Memory > bound || st.MaxMemory != bound || st.Evicted == 0 || st.Reads != 65 {
		t.Fatalf("after UID 2000's 64 lookups: %+v; want at most %d bytes held (one entry: %d)", st, bound, cost)
	}
	if _, how := c.ProcessFor(10, at(600), at(700), Claims{}); how != Found || c.EnvStats().Reads != 65 {
		t.Fatalf("UID 1000's process again: %v, %d reads (want its entry cached: 65)", how, c.EnvStats().Reads)
	}

	// At the count bound (4 entries) likewise.
	c = New()
	if err := enableEnvironment(c, root, 4); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{10, 100, 101, 102, 103, 104, 105, 106} {
		if _, how := c.ProcessFor(pid, at(600), at(700), Claims{}); how != Found {
			t.Fatalf("process %d: %v", pid, how)
		}
	}
	if _, how := c.ProcessFor(10, at(600), at(700), Claims{}); how != Found || c.EnvStats().Reads != 8 || c.EnvStats().Evicted != 4 {
		t.Fatalf("UID 1000's process at the count bound: %v, stats %+v (want its entry cached: 8 reads, 4 of UID 2000's evicted)", how, c.EnvStats())
	}

	// Eight users of one process each: the bound holds all the same.
	c = New()
	if err := enableEnvironment(c, root, 4); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		fakeProcess(t, root, 200+i, 500, "OTEL_SERVICE_NAME=one\x00", "0::/\n")
		status(200+i, 3000+i)
		if _, how := c.ProcessFor(200+i, at(600), at(700), Claims{}); how != Found {
			t.Fatalf("process %d: %v", 200+i, how)
		}
	}
	if st := c.EnvStats(); st.Evicted != 4 {
		t.Fatalf("eight users' processes at a count bound of 4: %+v, want 4 evicted", st)
	}
}

// TestCloseEnvironmentClosesPidfds: the environment source holds a pidfd
// per process it named; CloseEnvironment (the extension's Shutdown)
// closes them, and a look-up afterwards finds the source off.
func TestCloseEnvironmentClosesPidfds(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	cmd.Env = []string{"OTEL_SERVICE_NAME=closing"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := New()
	if err := enableEnvironment(c, "/proc", 0); err != nil {
		t.Fatal(err)
	}
	openFDs := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := openFDs()
	var how Lookup
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		now := time.Now().UnixNano()
		if _, how = c.ProcessFor(cmd.Process.Pid, now, now, Claims{}); how == Found {
			break
		}
		runtime.Gosched() // sleep's exec may not have happened yet
	}
	if how != Found {
		t.Fatalf("the child named by its environment: %v", how)
	}
	if open := openFDs(); open <= before {
		t.Fatalf("%d descriptors open after the look-up, %d before: no pidfd kept?", open, before)
	}
	c.CloseEnvironment()
	c.CloseEnvironment() // twice is fine
	if open := openFDs(); open != before {
		t.Errorf("%d descriptors open after CloseEnvironment, %d before the look-up", open, before)
	}
	now := time.Now().UnixNano()
	if _, how := c.ProcessFor(cmd.Process.Pid, now, now, Claims{}); how == Found || c.EnvironmentEnabled() {
		t.Errorf("after CloseEnvironment: %v, enabled %v", how, c.EnvironmentEnabled())
	}
}

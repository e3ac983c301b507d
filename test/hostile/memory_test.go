// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/distrun"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// The DaemonSet's memory limit and GOMEMLIMIT (deploy/kubernetes; the
// systemd unit's MemoryMax is the same).
const (
	podMemoryLimit = 256 << 20
	podGoMemLimit  = "200MiB"
)

// forkCopies is how many copy-on-write copies of forkpub (a 64 KiB
// context, 16 attributes of 4,000 bytes, without MADV_DONTFORK) the
// attacks fork: all tracked, their decoded contexts alone would hold over
// 256 MiB.
const forkCopies = 4000

// TestForkedPublishersInPodLimit: one user (nobody), then eight UIDs, then
// eight UIDs that nobody's user namespace maps (host UIDs 300000-300007,
// as a subordinate range gives rootless Podman), then eight UIDs in one
// container's cgroup fork 4,000 copies of a
// publisher of a 64 KiB context; the built distribution, with the
// extension's defaults (limits.max_process_memory included) and
// GOMEMLIMIT as the DaemonSet sets it, runs in a memory cgroup of the
// DaemonSet's 256 MiB. It is not OOM-killed, looks at every copy (tracked
// or refused), and announces a publisher of another user started
// afterwards. Its peak memory and the neighbour's delay are logged.
// Before limits.max_process_memory: every copy tracked, the collector
// OOM-killed within seconds.
func TestForkedPublishersInPodLimit(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	for _, tc := range []struct {
		name   string
		copies int
		uids   []int
		// userns: forkpub runs as root in nobody's user namespace, which
		// maps its UIDs 0-7 to host UIDs 300000-300007.
		userns bool
		// container: forkpub runs in a container's cgroup (as root there
		// without a user namespace, as with hostPID).
		container bool
	}{
		// The neighbour's delay without the attack, for comparison.
		{"no_copies", 0, []int{65534}, false, false},
		{"one_uid", forkCopies, []int{65534}, false, false},
		{"eight_uids", forkCopies, []int{70001, 70002, 70003, 70004, 70005, 70006, 70007, 70008}, false, false},
		{"eight_uids_in_a_user_namespace", forkCopies, []int{0, 1, 2, 3, 4, 5, 6, 7}, true, false},
		{"eight_uids_in_a_container", forkCopies, []int{70001, 70002, 70003, 70004, 70005, 70006, 70007, 70008}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var enter []string
			if tc.userns {
				enter = testenv.EnterArgs(t, testenv.MintingNamespace(t, 65534, 300000, 8), 0)
			}
			var attr *syscall.SysProcAttr
			if tc.container {
				attr = testenv.ContainerCgroups(t, "docker-"+strings.Repeat("4e", 32)+".scope")[0]
			}
			forkedCopiesInPod(t, bin, tc.copies, tc.uids, enter, attr)
		})
	}
}

// forkedCopiesInPod runs forkpub (through enter, a command prefix, when
// set), has it fork the copies under uids, then the collector in a memory
// cgroup, and a neighbour once the collector has looked at every copy.
func forkedCopiesInPod(t *testing.T, bin string, copies int, uids []int, enter []string, attr *syscall.SysProcAttr) {
	cg := newMemoryCgroup(t, podMemoryLimit)
	fp := startForkpub(t, enter, attr)
	if copies > 0 {
		args := []string{"fork", strconv.Itoa(copies)}
		for _, u := range uids {
			args = append(args, strconv.Itoa(u))
		}
		if got := fp.do(strings.Join(args, " ")); got != "ok "+strconv.Itoa(copies) {
			t.Fatalf("forkpub: %q", got)
		}
	}

	dir := t.TempDir()
	events := &eventsFile{path: filepath.Join(dir, "events.jsonl")}
	port := distrun.FreePort(t)
	// The shell joins the cgroup before the exec, so that everything the
	// collector maps and its reader helper are charged to it.
	via := []string{"sh", "-c", `echo $$ > "$0" && exec env GOMEMLIMIT=` + podGoMemLimit + ` "$@"`, cg.procs()}
	c := distrun.StartConfigVia(t, via, bin, dir, distrun.Config{
		Entities: events.path, EntityInterval: time.Minute, MetricsPort: port,
	})
	alive := func() {
		if c.Exited() {
			t.Fatalf("the collector exited (%v): cgroup peak %.1f MiB of %d MiB, OOM kills %d", c.Err(), mib(cg.peak(t)), podMemoryLimit>>20, cg.oomKills(t))
		}
	}
	metric := func(name string, labels ...string) float64 {
		v, _ := distrun.Metric(port, name, labels...)
		return v
	}
	// Every copy and forkpub itself tracked or refused at least once.
	testenv.EventuallyEvery(t, 5*time.Minute, 200*time.Millisecond, "the collector looked at every copy", func() bool {
		alive()
		looked := metric("otelcol_processctx_contexts")
		for _, r := range []string{"user_share", "memory_share", "process_limit"} {
			looked += metric("otelcol_processctx_reads_failed", `reason="`+r+`"`)
		}
		return looked >= float64(copies+1)
	})

	neighbour := testpub.StartAs(t, testpub.Glibc, &syscall.Credential{Uid: 1234, Gid: 1234})
	neighbour.Set("service.name", "neighbour")
	neighbour.Publish()
	started := time.Now()
	testenv.EventuallyEvery(t, 2*time.Minute, 20*time.Millisecond, "the neighbour announced", func() bool {
		alive()
		return events.announced(t, neighbour.PID, "neighbour")
	})
	delay := time.Since(started)
	hwm := vmHWM(t, c.Cmd.Process.Pid)
	tracked := metric("otelcol_processctx_contexts")
	refusedMem, refusedShare := metric("otelcol_processctx_reads_failed", `reason="memory_share"`), metric("otelcol_processctx_reads_failed", `reason="user_share"`)
	evicted := metric("otelcol_processctx_catalog_evictions", `kind="tracked_processes"`)
	held, ceiling := metric("otelcol_processctx_process_memory", `part="contexts"`), metric("otelcol_processctx_process_memory_limit", `part="contexts"`)
	if held > ceiling || ceiling == 0 {
		t.Errorf("the tracked contexts hold %.0f bytes, their part of limits.max_process_memory is %.0f", held, ceiling)
	}
	if err := c.Stop(testenv.Scaled(30 * time.Second)); err != nil {
		t.Error(err)
	}
	t.Logf("%d copies as UIDs %v: neighbour announced %v after its start; cgroup peak %.1f MiB (limit %d MiB), collector peak RSS %.1f MiB, OOM kills %d; tracked %.0f holding %.1f MiB of %.0f MiB, refused memory_share %.0f, user_share %.0f, evicted %.0f",
		copies, uids, delay.Round(time.Millisecond), mib(cg.peak(t)), podMemoryLimit>>20, mib(hwm), cg.oomKills(t), tracked, held/(1<<20), ceiling/(1<<20), refusedMem, refusedShare, evicted)
	if n := cg.oomKills(t); n != 0 {
		t.Errorf("%d OOM kills in the collector's cgroup", n)
	}
	// Under the limit, not at it: the cgroup never had to reclaim.
	if p := cg.peak(t); p >= podMemoryLimit {
		t.Errorf("the cgroup's peak %.1f MiB reached its limit", mib(p))
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// vmHWM is pid's peak resident set size (bytes).
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in the collector's status")
	return 0
}

// eventsFile is the collector's entity events (OTLP JSON, a batch a line),
// read on from where the last look stopped: the copies' events take tens
// of MiB.
type eventsFile struct {
	path string
	off  int64
	part []byte // a line not written whole yet
}

// announced reports whether an entity event of pid with service.name svc
// has been written.
func (e *eventsFile) announced(t *testing.T, pid int, svc string) bool {
	t.Helper()
	f, err := os.Open(e.path)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(e.off, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	e.off += int64(len(b))
	b = append(e.part, b...)
	i := bytes.LastIndexByte(b, '\n')
	e.part = append([]byte(nil), b[i+1:]...)
	want := []byte(`"` + svc + `"`)
	for _, line := range bytes.Split(b[:i+1], []byte{'\n'}) {
		// Only the lines that name svc are decoded.
		if bytes.Contains(line, want) && announcedIn(line, pid, svc) {
			return true
		}
	}
	return false
}

// memoryCgroup is a memory cgroup of the test's, v2 where the memory
// controller is on the unified hierarchy, else v1.
type memoryCgroup struct {
	dir string
	v2  bool
}

// newMemoryCgroup makes a memory cgroup limited to limit bytes (no swap),
// removed when the test ends (its processes are gone by then).
func newMemoryCgroup(t *testing.T, limit int64) *memoryCgroup {
	t.Helper()
	name := fmt.Sprintf("otelctx-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	var cg *memoryCgroup
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil && strings.Contains(" "+string(b)+" ", " memory") {
			// The controller must be on for the root's children.
			_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+memory"), 0)
			cg = &memoryCgroup{dir: filepath.Join(root, name), v2: true}
			break
		}
	}
	if cg == nil {
		root := "/sys/fs/cgroup/memory"
		if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
			testenv.Missing(t, "no memory cgroup controller (v2 or v1 at "+root+")")
		}
		cg = &memoryCgroup{dir: filepath.Join(root, name)}
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		testenv.Missing(t, "cannot make a memory cgroup ("+err.Error()+")")
	}
	t.Cleanup(func() {
		// The collector's reader helper may still be exiting.
		testenv.EventuallyWithin(t, 2*time.Minute, "the memory cgroup empty", func() bool {
			b, err := os.ReadFile(cg.procs())
			return err == nil && len(bytes.TrimSpace(b)) == 0
		})
		if err := os.Remove(cg.dir); err != nil {
			t.Errorf("removing the memory cgroup: %v", err)
		}
	})
	l := strconv.FormatInt(limit, 10)
	if _, err := os.Stat(filepath.Join(cg.dir, "memory.max")); cg.v2 && err != nil {
		testenv.Missing(t, "the memory controller is not on for a new cgroup of "+filepath.Dir(cg.dir))
	}
	if cg.v2 {
		cg.write(t, "memory.max", l)
		cg.write(t, "memory.swap.max", "0")
	} else {
		cg.write(t, "memory.limit_in_bytes", l)
		// Where there is swap, the limit covers it too.
		_ = os.WriteFile(filepath.Join(cg.dir, "memory.memsw.limit_in_bytes"), []byte(l), 0)
	}
	return cg
}

func (cg *memoryCgroup) write(t *testing.T, file, v string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(cg.dir, file), []byte(v), 0); err != nil && !(file == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
		t.Fatal(err)
	}
}

func (cg *memoryCgroup) procs() string { return filepath.Join(cg.dir, "cgroup.procs") }

// peak is the most the cgroup has held (bytes).
func (cg *memoryCgroup) peak(t *testing.T) int64 {
	t.Helper()
	file := "memory.max_usage_in_bytes"
	if cg.v2 {
		file = "memory.peak" // Linux 5.19
	}
	b, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		testenv.Missing(t, "no "+file+" ("+err.Error()+")")
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// oomKills is the OOM killer's kills in the cgroup.
func (cg *memoryCgroup) oomKills(t *testing.T) int64 {
	t.Helper()
	file := "memory.oom_control"
	if cg.v2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	testenv.Missing(t, "no oom_kill count in "+file+" (kernel before 4.13)")
	return 0
}

// forkpubProc is testdata/forkpub.c running in its own process group,
// which is killed (forkpub and every copy) when the test ends.
type forkpubProc struct {
	t     *testing.T
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startForkpub runs forkpub through enter (a command prefix, or none), in
// the cgroup of attr when set (ContainerCgroups).
func startForkpub(t *testing.T, enter []string, attr *syscall.SysProcAttr) *forkpubProc {
	t.Helper()
	cc := testenv.RequireTool(t, "gcc")
	dir := threadpub.SourceDir()
	exe := testpub.CompileC(t, cc, "forkpub", filepath.Join(filepath.Dir(hostileSource()), "forkpub.c"), "-O2", "-Wall", "-I", dir,
		"-DPROCCTX_H="+fileDigest(t, filepath.Join(dir, "procctx.h")))
	argv := append(append([]string(nil), enter...), exe)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if attr != nil {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = attr.UseCgroupFD, attr.CgroupFD
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		// The copies die with forkpub (PR_SET_PDEATHSIG) and with the group:
		// none may outlive the test (they would hold PIDs).
		testenv.Eventually(t, "forkpub's copies gone", func() bool {
			return syscall.Kill(-cmd.Process.Pid, 0) == syscall.ESRCH
		})
	})
	p := &forkpubProc{t: t, stdin: stdin, out: bufio.NewReader(stdout)}
	if l := p.line(); l != "ready "+strconv.Itoa(cmd.Process.Pid) {
		t.Fatalf("forkpub: greeting %q", l)
	}
	return p
}

func (p *forkpubProc) line() string {
	p.t.Helper()
	l, err := p.out.ReadString('\n')
	if err != nil {
		p.t.Fatalf("forkpub: %v", err)
	}
	return strings.TrimSuffix(l, "\n")
}

func (p *forkpubProc) do(cmd string) string {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		p.t.Fatal(err)
	}
	return p.line()
}

// fileDigest is a short digest of a file, for a CompileC flag: its cache
// key covers the main source and the flags only.
func fileDigest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

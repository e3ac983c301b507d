// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/testutil/fakeprof"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// systemdBinary is the service manager, which the sandbox test runs as PID
// 1 of a private PID namespace.
func systemdBinary(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/lib/systemd/systemd", "/usr/lib/systemd/systemd"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	testenv.Missing(t, "systemd is not installed (/lib/systemd/systemd)")
	return ""
}

// unifiedCgroup is where the host's cgroup v2 hierarchy is mounted.
func unifiedCgroup(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil {
			if _, err := os.Stat(filepath.Join(p, "cgroup.controllers")); err == nil {
				return p
			}
		}
	}
	testenv.Missing(t, "no cgroup v2 hierarchy (systemd needs one)")
	return ""
}

// unitEnvFile is the unit's EnvironmentFile (the gateway's address).
const unitEnvFile = "/etc/otelctx/otelctx.env"

// sandboxUnits writes the units the sandbox test starts into dir: the
// shipped unit as it is (ExecStart pointed at the test's binary and
// configuration), a drop-in that only makes it testable (no dependency on
// the boot targets, uid 65534, output to a file), the demo publisher as
// root, and a target that starts both.
func sandboxUnits(t *testing.T, dir string, configs []string, demo string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), unitPath))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	exec0 := unitKey(t, unit, "ExecStart")
	var args []string
	for _, c := range configs {
		args = append(args, "--config", c)
	}
	execStart := filepath.Join(dir, "otelcol-otelctx") + " " + strings.Join(args, " ") +
		" --feature-gates=service.profilesSupport,extension.healthcheck.useComponentStatus"
	unit = strings.Replace(unit, "ExecStart="+exec0, "ExecStart="+execStart, 1)
	// The gateway's file in the test's directory (present or not: the test says).
	unit = strings.ReplaceAll(unit, unitEnvFile, filepath.Join(dir, "otelctx.env"))
	files := map[string]string{
		"otelctx.service": unit,
		"otelctx.service.d/test.conf": fmt.Sprintf(`[Unit]
DefaultDependencies=no
[Service]
User=nobody
StandardOutput=file:%s
StandardError=inherit
`, filepath.Join(dir, "collector.log")),
		"otelctx-demo.service": fmt.Sprintf(`[Unit]
DefaultDependencies=no
[Service]
ExecStart=%s --demo --demo-threads 1 --demo-busy 20
StandardOutput=null
`, demo),
		"otelctx-test.target": `[Unit]
DefaultDependencies=no
Wants=otelctx-demo.service otelctx.service
`,
	}
	for name, text := range files {
		p := filepath.Join(dir, "units", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSystemdUnitSandbox: the shipped unit, run by systemd itself with all
// its hardening (SystemCallFilter, RestrictAddressFamilies, the read-only
// /proc/sys and /sys, the hidden /proc/kcore and /dev/kmsg, ProtectClock,
// DynamicUser, the capabilities), loads the eBPF sampler as uid 65534,
// follows a running profiler (a stand-in named as the OTel eBPF profiler's
// program) through the method this kernel allows (fentry, or hrtimer where
// fentry is refused: CAP_SYSLOG and /proc/kallsyms under the unit), and
// emits the entity events of the demo publisher running as root.
// TestLeastPrivilege applies only the capabilities (setpriv); this test
// applies the unit. systemd runs as PID 1 of private PID, mount, cgroup,
// UTS and IPC namespaces (with its own /run, /proc and cgroup v2 subtree),
// so nothing of the host's service manager or /run is touched; the demo
// runs in the same PID namespace as the collector. systemctl reload then
// runs the unit's ExecReload.
func TestSystemdUnitSandbox(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	demo := demoBinary(t)
	_ = os.Chmod(filepath.Dir(demo), 0o755)

	// Not under /tmp: PrivateTmp= gives the unit its own. Readable by 65534.
	dir, err := os.MkdirTemp("/var/lib", "otelctx-systemd-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, bin, filepath.Join(dir, "otelcol-otelctx"), 0o755)
	copyFile(t, filepath.Join(repoRoot(t), "config", "otelctx.yaml"), filepath.Join(dir, "otelctx.yaml"), 0o644)
	port := freePort(t)
	overlay := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
      http:
        endpoint: 127.0.0.1:0
service:
  telemetry:
    metrics:
      level: normal
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %d
`, port)
	if err := os.WriteFile(filepath.Join(dir, "test.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	sandboxUnits(t, dir, []string{filepath.Join(dir, "otelctx.yaml"), filepath.Join(dir, "test.yaml")}, demo)
	if err := os.WriteFile(filepath.Join(dir, "otelctx.env"), []byte("OTELCTX_GATEWAY_ENDPOINT=127.0.0.1:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prof, err := fakeprof.Start(97, "native_tracer_entry")
	if err != nil {
		testenv.Missing(t, "the stand-in profiler does not load: "+err.Error())
	}
	t.Cleanup(func() { _ = prof.Stop(); prof.Close() })
	mgr := startManager(t, dir)

	log := func() string { b, _ := os.ReadFile(filepath.Join(dir, "collector.log")); return string(b) }
	waitFor(t, 60*time.Second, "entity event of the demo from the unit's collector", func() bool {
		if mgr.exited() {
			t.Fatalf("systemd exited: %s", mgr.output())
		}
		return entityLine.MatchString(log())
	})
	// The sampler is loaded and follows the profiler under the unit's
	// sandbox: fentry where the kernel allows trampolines, hrtimer where it
	// refuses them (this project's test machine).
	var method []string
	waitFor(t, 60*time.Second, "the unit's collector following the stand-in profiler", func() bool {
		method = following.FindStringSubmatch(log())
		return method != nil || strings.Contains(log(), "thread contexts: off") || strings.Contains(log(), "cannot follow")
	})
	if method == nil {
		t.Fatal("the unit's collector does not follow the profiler: does the unit take away what a follow method needs?")
	}
	t.Logf("the unit's collector follows through %s", method[1])
	st := collectorStatus(t, filepath.Join(dir, "otelcol-otelctx"))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^Uid:\s+65534\s`),
		regexp.MustCompile(`(?m)^NoNewPrivs:\s+1$`),
		regexp.MustCompile(`(?m)^Seccomp:\s+2$`), // a filter is installed
	} {
		if !want.MatchString(st) {
			t.Errorf("the collector's status has no %s:\n%s", want, st)
		}
	}
	if want := unitCapMask(t); !regexp.MustCompile(`(?m)^CapEff:\s+` + want + `$`).MatchString(st) {
		t.Errorf("the collector's effective capabilities are not %s (the unit's):\n%s", want, st)
	}

	// systemctl reload runs the unit's ExecReload (SIGHUP, under the unit's
	// sandbox): the collector restarts its components and announces the
	// demo again.
	nsenter := testenv.RequireTool(t, "nsenter")
	announced := strings.Count(log(), "otelctx-demo\"}")
	pid1 := managerPID(t, mgr.cmd.Process.Pid)
	if out, err := exec.Command(nsenter, "-t", fmt.Sprint(pid1), "-m", "-p", "systemctl", "reload", "otelctx.service").CombinedOutput(); err != nil {
		t.Fatalf("systemctl reload otelctx.service: %v\n%s", err, out)
	}
	waitFor(t, 60*time.Second, "the reload's restart and the demo announced again", func() bool {
		l := log()
		return strings.Contains(l, "Config updated, restart service") && strings.Count(l, "otelctx-demo\"}") > announced
	})
}

// startManager runs systemd as PID 1 of private PID, mount, cgroup, UTS and
// IPC namespaces (its own /run, /proc and cgroup v2 subtree) with the units
// sandboxUnits wrote into dir, starting otelctx-test.target.
func startManager(t *testing.T, dir string) *proc {
	t.Helper()
	systemd := systemdBinary(t)
	unshare := testenv.RequireTool(t, "unshare")
	cgroot := unifiedCgroup(t)
	console := filepath.Join(dir, "console.log")
	if err := os.WriteFile(console, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// A cgroup of the test's own: systemd builds its tree under it, and it
	// is removed when the test ends.
	cg := filepath.Join(cgroot, filepath.Base(dir))
	if err := os.Mkdir(cg, 0o755); err != nil {
		testenv.Missing(t, "cannot create a cgroup for systemd: "+err.Error())
	}
	t.Cleanup(func() { removeCgroup(cg) })

	inner := strings.Join([]string{
		"set -e",
		"mount --make-rprivate /",
		"mount -t proc proc /proc",
		"mount -t tmpfs tmpfs /run",
		"mount -t cgroup2 cgroup2 /sys/fs/cgroup",
		// The manager's own log (it writes to /dev/console).
		"mount --bind " + console + " /dev/console",
		"exec env container=otelctx-test SYSTEMD_UNIT_PATH=" + filepath.Join(dir, "units") + ": " +
			systemd + " --system --unit=otelctx-test.target --log-target=console",
	}, "\n")
	outer := fmt.Sprintf("echo $$ > %s/cgroup.procs && exec %s --pid --fork --mount --cgroup --uts --ipc --kill-child sh -c '%s'",
		cg, unshare, inner)
	mgr := startProc(t, exec.Command("sh", "-c", outer))
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(console)
			t.Logf("systemd's log:\n%s", b)
			b, _ = os.ReadFile(filepath.Join(dir, "collector.log"))
			t.Logf("the collector's output:\n%s", b)
		}
	})

	return mgr
}

// managerPID is the host PID of the systemd that unshare (pid) forked.
func managerPID(t *testing.T, pid int) int {
	t.Helper()
	var child int
	waitFor(t, 10*time.Second, "systemd under unshare", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if err != nil {
			return false
		}
		_, err = fmt.Sscan(string(b), &child)
		return err == nil
	})
	return child
}

// collectorStatus returns /proc/PID/status of the process running exe.
func collectorStatus(t *testing.T, exe string) string {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && l == exe {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
			if err == nil {
				return string(b)
			}
		}
	}
	t.Fatalf("no process runs %s", exe)
	return ""
}

// removeCgroup removes a cgroup and its children, deepest first (the
// processes in it are gone with the PID namespace).
func removeCgroup(cg string) {
	var dirs []string
	_ = filepath.WalkDir(cg, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	populated := func() bool {
		b, err := os.ReadFile(filepath.Join(cg, "cgroup.events"))
		return err == nil && strings.Contains(string(b), "populated 1")
	}
	deadline := time.Now().Add(10 * time.Second)
	for populated() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i])
	}
}

// waitFor polls cond every 200 ms (testenv.EventuallyEvery) until it
// holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.EventuallyEvery(t, timeout, 200*time.Millisecond, what, cond)
}

// following is the sampler's line when it follows the stand-in profiler,
// with the method.
var following = regexp.MustCompile(`thread contexts: eBPF at the samples of native_tracer_\w* \(BPF program \d+, (fentry|hrtimer)\)`)

// capNumbers are the capabilities a unit may grant, by name.
var capNumbers = map[string]uint{
	"CAP_DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH, "CAP_SYS_PTRACE": unix.CAP_SYS_PTRACE,
	"CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN, "CAP_SYSLOG": unix.CAP_SYSLOG,
	"CAP_PERFMON": unix.CAP_PERFMON, "CAP_BPF": unix.CAP_BPF,
}

// unitCapMask is the unit's AmbientCapabilities as /proc/PID/status prints
// a capability set (16 hex digits).
func unitCapMask(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), unitPath))
	if err != nil {
		t.Fatal(err)
	}
	var mask uint64
	for _, c := range strings.Fields(unitKey(t, string(b), "AmbientCapabilities")) {
		n, ok := capNumbers[c]
		if !ok {
			t.Fatalf("%s: capability %s is not in capNumbers", unitPath, c)
		}
		mask |= 1 << n
	}
	return fmt.Sprintf("%016x", mask)
}

// TestSystemdUnitMissingGatewayFile: without the gateway's file the shipped
// unit fails once and says why (AssertPathExists), under systemd itself: no
// collector is started, nothing is restarted, and `systemctl status` names
// the file. (Before, EnvironmentFile=- let a collector start without its
// gateway, exit, and be restarted every RestartSec.)
func TestSystemdUnitMissingGatewayFile(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	nsenter := testenv.RequireTool(t, "nsenter")
	demo := demoBinary(t)
	_ = os.Chmod(filepath.Dir(demo), 0o755)
	dir, err := os.MkdirTemp("/var/lib", "otelctx-systemd-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, bin, filepath.Join(dir, "otelcol-otelctx"), 0o755)
	copyFile(t, filepath.Join(repoRoot(t), productionConfig), filepath.Join(dir, "otelctx.yaml"), 0o644)
	sandboxUnits(t, dir, []string{filepath.Join(dir, "otelctx.yaml"), productionOverlay(t, dir, freePort(t))}, demo)
	mgr := startManager(t, dir)
	pid1 := managerPID(t, mgr.cmd.Process.Pid)
	systemctl := func(args ...string) string {
		out, _ := exec.Command(nsenter, append([]string{"-t", fmt.Sprint(pid1), "-m", "-p", "systemctl"}, args...)...).CombinedOutput()
		return string(out)
	}
	show := func() string {
		return systemctl("show", "otelctx.service", "-p", "ActiveState", "-p", "SubState", "-p", "NRestarts", "-p", "AssertResult")
	}
	// Settled: no job left and the unit neither running nor waiting to be
	// restarted (a restart loop never settles).
	waitFor(t, 60*time.Second, "otelctx.service to settle", func() bool {
		if mgr.exited() {
			t.Fatalf("systemd exited: %s", mgr.output())
		}
		st := show()
		return strings.TrimSpace(systemctl("list-jobs", "--no-legend")) == "" &&
			regexp.MustCompile(`(?m)^ActiveState=(failed|inactive)$`).MatchString(st)
	})
	st := show()
	for _, want := range []string{"NRestarts=0", "AssertResult=no"} {
		if !strings.Contains(st, want) {
			t.Errorf("otelctx.service: %s, want %s", st, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "collector.log")); err == nil {
		t.Errorf("a collector was started without the gateway's file")
	}
	if status := systemctl("status", "otelctx.service"); !strings.Contains(status, "AssertPathExists="+filepath.Join(dir, "otelctx.env")) {
		t.Errorf("systemctl status does not name the missing file:\n%s", status)
	}
}

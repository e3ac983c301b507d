// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

const unitPath = "deploy/systemd/otelctx.service"

// unitKey returns the value of key in the unit file (the last one).
func unitKey(t *testing.T, unit, key string) string {
	t.Helper()
	var v string
	for _, l := range strings.Split(unit, "\n") {
		if k, val, ok := strings.Cut(strings.TrimSpace(l), "="); ok && k == key {
			v = strings.TrimSpace(val)
		}
	}
	if v == "" {
		t.Fatalf("%s has no %s=", unitPath, key)
	}
	return v
}

// TestSystemdUnitVerifies: systemd-analyze verify accepts the unit without a
// warning (an unknown key is only a warning to systemd, an error here). The
// binary path is pointed at the built distribution, since verify checks
// that ExecStart's program exists.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze := testenv.RequireTool(t, "systemd-analyze")
	bin := testenv.DistBinary(t)
	b, err := os.ReadFile(filepath.Join(repoRoot(t), unitPath))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	exec0 := strings.Fields(unitKey(t, unit, "ExecStart"))[0]
	if exec0 != "/usr/local/bin/otelcol-otelctx" {
		t.Errorf("ExecStart runs %s, docs/deploy.md installs /usr/local/bin/otelcol-otelctx", exec0)
	}
	if unitKey(t, unit, "AmbientCapabilities") != unitKey(t, unit, "CapabilityBoundingSet") {
		t.Errorf("AmbientCapabilities and CapabilityBoundingSet differ")
	}
	if u := unitKey(t, unit, "DynamicUser"); u != "yes" {
		t.Errorf("DynamicUser=%s: the unit must not run as root", u)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "otelctx.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, exec0, bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestLeastPrivilege: the collector as a non-root user (65534) with exactly
// the unit's AmbientCapabilities (applied with setpriv, as docs/deploy.md's
// recipe without systemd does) loads its eBPF sampler, samples the threads
// of the demo publisher running as root (another user), and emits its
// entity events.
func TestLeastPrivilege(t *testing.T) {
	testenv.RequireRoot(t)
	setpriv := testenv.RequireTool(t, "setpriv")
	bin := testenv.DistBinary(t)
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, unitPath))
	if err != nil {
		t.Fatal(err)
	}
	var caps []string
	for _, c := range strings.Fields(unitKey(t, string(b), "AmbientCapabilities")) {
		caps = append(caps, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
	}
	capList := "-all," + strings.Join(caps, ",")

	// The binary and configurations where user 65534 can read them.
	dir, err := os.MkdirTemp("", "otelctx-leastpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, bin, filepath.Join(dir, "otelcol-otelctx"), 0o755)
	copyFile(t, filepath.Join(root, "config", "otelctx.yaml"), filepath.Join(dir, "otelctx.yaml"), 0o644)
	port := freePort(t)
	telemetry := fmt.Sprintf(`service:
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
	if err := os.WriteFile(filepath.Join(dir, "telemetry.yaml"), []byte(telemetry), 0o644); err != nil {
		t.Fatal(err)
	}

	pid := startDemo(t, nil) // root: another user than the collector
	args := []string{"--reuid=65534", "--regid=65534", "--clear-groups",
		"--inh-caps=" + capList, "--ambient-caps=" + capList, "--bounding-set=" + capList,
		filepath.Join(dir, "otelcol-otelctx"),
		"--config", filepath.Join(dir, "otelctx.yaml"), "--config", filepath.Join(dir, "telemetry.yaml"),
		"--feature-gates=service.profilesSupport,extension.healthcheck.useComponentStatus",
		fmt.Sprintf("--set=extensions::process_ctx::include::pids=[%d]", pid),
		"--set=receivers::otlp::protocols::grpc::endpoint=127.0.0.1:0",
		"--set=receivers::otlp::protocols::http::endpoint=127.0.0.1:0",
	}
	cmd := exec.Command(setpriv, args...)
	cmd.Dir = "/"
	col := startProc(t, cmd)
	col.waitOutput(t, "entity event of the demo (running as root)", entityLine, 30*time.Second)
	if regexp.MustCompile(`thread contexts: off`).MatchString(col.output()) {
		t.Fatalf("the eBPF sampler did not load with %s", capList)
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", col.cmd.Process.Pid)); err == nil {
		if !regexp.MustCompile(`(?m)^Uid:\s+65534\s`).Match(st) {
			t.Errorf("the collector does not run as uid 65534:\n%s", st)
		}
	}
	// eBPF samples of the demo's threads, read in the kernel.
	var samples float64
	testenv.EventuallyEvery(t, 20*time.Second, 500*time.Millisecond, "eBPF thread samples of the demo as uid 65534 with "+capList, func() bool {
		// The collector serves counters without the _total suffix.
		samples = metricValue(t, port, "otelcol_processctx_thread_samples") + metricValue(t, port, "otelcol_processctx_thread_samples_total")
		return samples > 0
	})
	t.Logf("as uid 65534 with %s: %v eBPF thread samples", capList, samples)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// metricValue sums the samples of a Prometheus metric (every label set);
// 0 when absent or the endpoint does not answer yet.
func metricValue(t *testing.T, port int, name string) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, name) || (len(l) > len(name) && l[len(name)] != ' ' && l[len(name)] != '{') {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/otelctx/otelctx/internal/testutil/distrun"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// productionConfig is the production configuration the systemd unit and
// the ConfigMap use.
const productionConfig = "config/otelctx-production.yaml"

// kubernetesConfig is what the DaemonSet merges over it: the processors
// that read the Kubernetes API.
const kubernetesConfig = "config/otelctx-kubernetes.yaml"

func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// healthEndpoint is the health_check extension's endpoint in cfg.
func healthEndpoint(t *testing.T, cfg string) string {
	t.Helper()
	var c struct {
		Extensions map[string]struct {
			HTTP struct {
				Endpoint string `json:"endpoint"`
			} `json:"http"`
		} `json:"extensions"`
	}
	if err := yaml.Unmarshal([]byte(cfg), &c); err != nil {
		t.Fatal(err)
	}
	ep := c.Extensions["health_check"].HTTP.Endpoint
	if ep == "" {
		t.Fatalf("%s has no health_check endpoint", productionConfig)
	}
	return ep
}

// TestKubernetesConfigIsProduction: the ConfigMap holds the production
// configuration and the Kubernetes additions, each unchanged, read in that
// order, and the pod template's checksum annotation is the SHA-256 of the
// two texts in that order, so that changing either rolls the pods.
func TestKubernetesConfigIsProduction(t *testing.T) {
	s := kubeManifests(t)
	files := []string{productionConfig, kubernetesConfig}
	paths := configArgs(t, s.container)
	if len(paths) != len(files) {
		t.Fatalf("the DaemonSet reads %v, want the ConfigMap's copies of %v in that order", paths, files)
	}
	h := sha256.New()
	for i, f := range files {
		key := filepath.Base(paths[i])
		got := s.cm.Data[key]
		if got != readRepoFile(t, f) {
			t.Errorf("the ConfigMap's %s (--config number %d) is not the text of %s: copy it (indented by 4)", key, i+1, f)
		}
		h.Write([]byte(got))
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if a := s.ds.Spec.Template.Annotations["otelctx.io/config-sha256"]; a != sum {
		t.Errorf("pod template annotation otelctx.io/config-sha256 = %q, the ConfigMap's configuration hashes to %s", a, sum)
	}
}

// imagePlatforms are the platforms make image builds (IMAGE_PLATFORMS).
func imagePlatforms(t *testing.T) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^IMAGE_PLATFORMS\s*\?=\s*(.+)$`).FindStringSubmatch(readRepoFile(t, "Makefile"))
	if m == nil {
		t.Fatal("the Makefile sets no IMAGE_PLATFORMS")
	}
	return strings.Fields(m[1])
}

// TestKubernetesScheduling: Linux nodes of exactly the architectures of
// the image, the manifests' PriorityClass, probes on the health_check
// extension of the configuration.
func TestKubernetesScheduling(t *testing.T) {
	s := kubeManifests(t)
	pod := s.ds.Spec.Template.Spec
	if pod.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("nodeSelector %v has no kubernetes.io/os: linux", pod.NodeSelector)
	}
	var archs []string
	if a := pod.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, e := range term.MatchExpressions {
				if e.Key == "kubernetes.io/arch" && e.Operator == corev1.NodeSelectorOpIn {
					archs = append(archs, e.Values...)
				}
			}
		}
	}
	var want []string
	for _, p := range imagePlatforms(t) {
		want = append(want, strings.TrimPrefix(p, "linux/"))
	}
	slices.Sort(archs)
	slices.Sort(want)
	if !slices.Equal(archs, want) {
		t.Errorf("required kubernetes.io/arch %v, make image builds %v", archs, want)
	}
	if pod.PriorityClassName != s.pc.Name {
		t.Errorf("priorityClassName %q, the manifests' PriorityClass is %q", pod.PriorityClassName, s.pc.Name)
	}
	_, port, err := net.SplitHostPort(healthEndpoint(t, s.cm.Data[configKey(t, s)]))
	if err != nil {
		t.Fatal(err)
	}
	for name, pr := range map[string]*corev1.Probe{"readinessProbe": s.container.ReadinessProbe, "livenessProbe": s.container.LivenessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			t.Errorf("no %s (httpGet)", name)
			continue
		}
		if pr.HTTPGet.Host != "127.0.0.1" || pr.HTTPGet.Port.String() != port || pr.HTTPGet.Path != "/" {
			t.Errorf("%s: %s:%s%s, the health_check extension listens on 127.0.0.1:%s/", name, pr.HTTPGet.Host, pr.HTTPGet.Port.String(), pr.HTTPGet.Path, port)
		}
	}
}

// unitEnv is the environment the unit gives the collector (Environment=)
// and the gateway an installation's EnvironmentFile sets.
func unitEnv(unit string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "OTELCTX_GATEWAY_ENDPOINT=gateway.example:4317"}
	for _, l := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Environment="); ok {
			env = append(env, v)
		}
	}
	return env
}

// TestProductionConfigValidates: the production configuration passes
// `otelcol-otelctx validate` with the systemd unit's flags and environment
// and a gateway address; without the gateway's variable it is refused.
func TestProductionConfigValidates(t *testing.T) {
	bin := testenv.DistBinary(t)
	unit := readRepoFile(t, unitPath)
	args := strings.Fields(unitKey(t, unit, "ExecStart"))[1:]
	for i, a := range args {
		if a == "/etc/otelctx/otelctx.yaml" {
			args[i] = filepath.Join(repoRoot(t), productionConfig)
		}
	}
	if !slices.Contains(args, filepath.Join(repoRoot(t), productionConfig)) {
		t.Fatalf("ExecStart %v does not read /etc/otelctx/otelctx.yaml", args)
	}
	cmd := exec.Command(bin, append([]string{"validate"}, args...)...)
	cmd.Env = unitEnv(unit)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("validate %v: %v\n%s", args, err, out)
	}
	if r := unitKey(t, unit, "ExecReload"); r != "/bin/kill -HUP $MAINPID" {
		t.Errorf("ExecReload=%s: reload is SIGHUP to the collector", r)
	}
	cmd = exec.Command(bin, append([]string{"validate"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("validate without OTELCTX_GATEWAY_ENDPOINT passed:\n%s", out)
	}
}

// productionGates are the feature gates the production configuration
// runs with (the DaemonSet's and the unit's): profiles, and health_check
// from the components' status.
const productionGates = distrun.ProductionGates

// productionOverlay keeps a test's collector off fixed ports and paths (the
// catalog's socket in dir) and prints the entity events instead of sending
// them to a gateway.
func productionOverlay(t *testing.T, dir string, healthPort int) string {
	t.Helper()
	overlay := fmt.Sprintf(`extensions:
  health_check:
    http:
      endpoint: 127.0.0.1:%d
  process_ctx:
    catalog_endpoint: unix:%s
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
exporters:
  debug/entities:
    verbosity: normal
service:
  telemetry:
    metrics:
      level: none
      views: null
      readers: []
  pipelines:
    logs/entities:
      exporters: [debug/entities]
`, healthPort, filepath.Join(dir, "catalog.sock"))
	p := filepath.Join(dir, "test.yaml")
	if err := os.WriteFile(p, []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func healthStatus(port int) int {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestProductionConfigRuns: the production configuration, run as root next
// to the demo publisher, is ready (health_check 200) and emits the demo's
// entity events, with the node's BTF and without it. Without
// /sys/kernel/btf (a private mount namespace hides it) the collector runs
// in the documented degraded mode: thread contexts off, with a warning;
// process contexts and entity events as usual.
func TestProductionConfigRuns(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	for _, btf := range []bool{true, false} {
		t.Run(map[bool]string{true: "btf", false: "no-btf"}[btf], func(t *testing.T) {
			pid := startDemo(t, nil)
			port := freePort(t)
			args := []string{"--config", filepath.Join(repoRoot(t), productionConfig),
				"--config", productionOverlay(t, t.TempDir(), port),
				productionGates,
				fmt.Sprintf("--set=extensions::process_ctx::include::pids=[%d]", pid)}
			var cmd *exec.Cmd
			if btf {
				cmd = exec.Command(bin, args...)
			} else {
				unshare := testenv.RequireTool(t, "unshare")
				cmd = exec.Command(unshare, append([]string{"--mount", "--propagation", "private", "sh", "-c",
					`mount -t tmpfs none /sys/kernel/btf && exec "$0" "$@"`, bin}, args...)...)
			}
			cmd.Env = append(os.Environ(), "OTELCTX_GATEWAY_ENDPOINT=127.0.0.1:1")
			col := startProc(t, cmd)
			col.waitOutput(t, "the demo's entity event", entityLine, 30*time.Second)
			waitFor(t, 30*time.Second, "health_check 200", func() bool { return healthStatus(port) == http.StatusOK })
			off := strings.Contains(col.output(), "thread contexts: off")
			if off == btf {
				t.Errorf("with BTF %v: thread contexts off %v", btf, off)
			}
		})
	}
}

// TestReloadOnSIGHUP: SIGHUP (the unit's ExecReload) re-reads the
// configuration and restarts every component in the same process: the
// changed setting applies and the catalog, rebuilt by a discovery round at
// once, announces the demo again (docs/deploy.md, reload).
func TestReloadOnSIGHUP(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "otelctx.yaml")
	orig := readRepoFile(t, "config/otelctx.yaml")
	if !strings.Contains(orig, "entity_interval: 1m") {
		t.Fatal("config/otelctx.yaml sets no entity_interval: 1m (the setting this test changes)")
	}
	if err := os.WriteFile(cfg, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	pid := startDemo(t, nil)
	col := startProc(t, exec.Command(bin, append([]string{"--config", cfg, productionGates,
		fmt.Sprintf("--set=extensions::process_ctx::include::pids=[%d]", pid)}, isolationFlags...)...))
	demoInterval := func(ms int) *regexp.Regexp {
		return regexp.MustCompile(entityLine.String() + ` otel\.entity\.attributes=\{\} otel\.entity\.interval=` + fmt.Sprint(ms))
	}
	col.waitOutput(t, "the demo's entity event every 1m", demoInterval(60000), 30*time.Second)
	if err := os.WriteFile(cfg, []byte(strings.Replace(orig, "entity_interval: 1m", "entity_interval: 2m", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := col.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	col.waitOutput(t, "the reload", regexp.MustCompile(`Config updated, restart service`), 30*time.Second)
	col.waitOutput(t, "the demo's entity event every 2m after the reload", demoInterval(120000), 30*time.Second)
	if col.exited() {
		t.Fatal("the collector exited on SIGHUP")
	}
}

// podMonitor is the part of the Prometheus Operator's PodMonitor the
// example uses (its CRD is not in k8s.io/api); decodeStrict refuses any
// other field.
type podMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path"`
			Interval    string `json:"interval"`
			Relabelings []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
			} `json:"relabelings"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// TestPodMonitorExample: deploy/prometheus/podmonitor.yaml decodes
// strictly, selects the DaemonSet's pods in its namespace and scrapes
// their metrics port at /metrics.
func TestPodMonitorExample(t *testing.T) {
	s := kubeManifests(t)
	var pm podMonitor
	if err := decodeStrict([]byte(readRepoFile(t, "deploy/prometheus/podmonitor.yaml")), &pm); err != nil {
		t.Fatal(err)
	}
	if pm.APIVersion != "monitoring.coreos.com/v1" || pm.Kind != "PodMonitor" {
		t.Errorf("%s %s, want monitoring.coreos.com/v1 PodMonitor", pm.APIVersion, pm.Kind)
	}
	if pm.Metadata.Namespace != s.ns.Name {
		t.Errorf("namespace %q, the DaemonSet's is %q", pm.Metadata.Namespace, s.ns.Name)
	}
	sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(s.ds.Spec.Template.Labels)) {
		t.Errorf("selector %v does not select the DaemonSet's pods %v (%v)", pm.Spec.Selector, s.ds.Spec.Template.Labels, err)
	}
	ports := map[string]bool{}
	for _, p := range s.container.Ports {
		ports[p.Name] = true
	}
	if len(pm.Spec.PodMetricsEndpoints) == 0 {
		t.Fatal("no podMetricsEndpoints")
	}
	for _, e := range pm.Spec.PodMetricsEndpoints {
		if !ports[e.Port] || e.Path != "/metrics" {
			t.Errorf("endpoint port %q path %q: the container's ports are %v, the collector serves /metrics", e.Port, e.Path, ports)
		}
	}
}

// entityDeleteLine matches the demo's service.instance entity_delete as the
// debug exporter prints it at normal verbosity.
var entityDeleteLine = regexp.MustCompile(`otel\.entity\.event\.type=entity_delete otel\.entity\.type=service\.instance otel\.entity\.id=\{"service\.name":"otelctx-demo"\}`)

// TestEntityDeletesNotRefusedByMemoryLimiter: with the production
// configuration's memory_limiter refusing everything (a 2 MiB limit, under
// any heap), the demo's entity events still go out, and so does the
// entity_delete when the demo exits: the entities pipeline has no memory
// limiter (a refused delete is never sent again; states are repeated).
func TestEntityDeletesNotRefusedByMemoryLimiter(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	pid := startDemo(t, nil)
	cmd := exec.Command(bin, "--config", filepath.Join(repoRoot(t), productionConfig),
		"--config", productionOverlay(t, t.TempDir(), freePort(t)),
		productionGates,
		fmt.Sprintf("--set=extensions::process_ctx::include::pids=[%d]", pid),
		"--set=processors::memory_limiter::limit_percentage=0",
		"--set=processors::memory_limiter::spike_limit_percentage=0",
		"--set=processors::memory_limiter::limit_mib=2",
		"--set=processors::memory_limiter::spike_limit_mib=1")
	cmd.Env = append(os.Environ(), "OTELCTX_GATEWAY_ENDPOINT=127.0.0.1:1")
	col := startProc(t, cmd)
	col.waitOutput(t, "the memory limiter refusing data", regexp.MustCompile(`above soft limit`), 30*time.Second)
	col.waitOutput(t, "the demo's entity_state", entityLine, 30*time.Second)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	col.waitOutput(t, "the demo's entity_delete after it exited", entityDeleteLine, 60*time.Second)
}

// TestDebugLogLevel: docs/operating.md's way to see the debug log for one
// run, --set=service::telemetry::logs::level=debug on the production
// configuration, gives debug lines (the level is the collector's, for
// every component); without it there are none.
func TestDebugLogLevel(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	pid := startDemo(t, nil)
	debugLine := regexp.MustCompile(`(?m)^\S+\tdebug\t`)
	for _, debug := range []bool{false, true} {
		args := []string{"--config", filepath.Join(repoRoot(t), productionConfig),
			"--config", productionOverlay(t, t.TempDir(), freePort(t)),
			productionGates,
			fmt.Sprintf("--set=extensions::process_ctx::include::pids=[%d]", pid)}
		if debug {
			args = append(args, "--set=service::telemetry::logs::level=debug")
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "OTELCTX_GATEWAY_ENDPOINT=127.0.0.1:1")
		col := startProc(t, cmd)
		col.waitOutput(t, "the demo's entity event", entityLine, 30*time.Second)
		if debug {
			col.waitOutput(t, "a debug line", debugLine, 30*time.Second)
		} else if m := debugLine.FindString(col.output()); m != "" {
			t.Errorf("a debug line at the default level: %s", m)
		}
		col.stop(10 * time.Second)
	}
}

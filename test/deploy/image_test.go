package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testenv"
)

// imageCaps are the capabilities the container gets (docs/requirements.md,
// docs/deploy.md): everything else is dropped.
const imageCaps = "SYS_PTRACE,BPF,PERFMON,SYS_ADMIN,SYSLOG,DAC_READ_SEARCH"

// TestImage: `make image` builds the image here without a registry; the
// image, started as docs/deploy.md says (host PID namespace, only the
// documented capabilities, /sys/kernel/btf), prints the entity events of
// the demo publisher running on the host and loads its eBPF sampler; the
// image has no shell.
func TestImage(t *testing.T) {
	testenv.RequireRoot(t)
	podman := testenv.RequireTool(t, "podman")
	mk := testenv.RequireTool(t, "make")
	bin := distBinary(t)
	root := repoRoot(t)
	image := fmt.Sprintf("localhost/otelctx-test:%d", os.Getpid())

	build := exec.Command(mk, "--no-print-directory", "image", "IMAGE="+image, "IMAGE_BIN="+bin, "IMAGE_TOOL="+podman)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(podman, "rmi", "-f", image).Run() })

	// This machine's cgroup layout (v1/v2 hybrid) is refused by crun; runc
	// runs it. Raising rlimits needs CAP_SYS_RESOURCE, which this sandbox
	// lacks: keep them at or below the current ones.
	global := []string{}
	if _, err := exec.LookPath("runc"); err == nil {
		global = append(global, "--runtime", "runc")
	}
	limits := []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}

	// No shell in the image.
	sh := exec.Command(podman, append(append(append(global, "run", "--rm"), limits...), "--entrypoint", "/bin/sh", image, "-c", "true")...)
	if out, err := sh.CombinedOutput(); err == nil {
		t.Errorf("the image has a shell (/bin/sh ran):\n%s", out)
	}

	pid := startDemo(t, nil)
	name := fmt.Sprintf("otelctx-test-%d", os.Getpid())
	args := append(append([]string{}, global...), "run", "--rm", "--name", name,
		"--pid=host", "--cap-drop=all", "--cap-add="+imageCaps,
		"-v", "/sys/kernel/btf:/sys/kernel/btf:ro")
	args = append(args, limits...)
	args = append(args, image,
		// The image's default command, plus this test's isolation.
		"--config", "/etc/otelctx/otelctx.yaml", "--feature-gates=service.profilesSupport",
		fmt.Sprintf("--set=extensions::processctx::include::pids=[%d]", pid),
		"--set=service::telemetry::metrics::level=none")
	t.Cleanup(func() { _ = exec.Command(podman, "rm", "-f", "-t", "2", name).Run() })
	col := startProc(t, exec.Command(podman, args...))
	col.waitOutput(t, "entity event of the demo from the container", entityLine, 60*time.Second)
	if !regexp.MustCompile(`process\.pid=` + fmt.Sprint(pid) + `\b`).MatchString(col.output()) {
		t.Errorf("the demo's host PID %d is not on the resource", pid)
	}
	if regexp.MustCompile(`thread contexts: off`).MatchString(col.output()) {
		t.Errorf("the eBPF sampler did not load in the container with %s", imageCaps)
	}
}

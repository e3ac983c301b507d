// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// imageCaps are the capabilities the container gets (docs/requirements.md,
// docs/deploy.md): everything else is dropped.
const imageCaps = "SYS_PTRACE,BPF,PERFMON,SYS_ADMIN,SYSLOG,DAC_READ_SEARCH"

// TestImage: `make image` builds the image here without a registry; the
// image, started as docs/deploy.md says (host PID namespace, only the
// documented capabilities, BTF from the container's own sysfs), prints the entity events of
// the demo publisher running on the host and loads its eBPF sampler; the
// image has no shell, and its otelctx CLI runs in the running container
// (`podman exec`, as `kubectl exec` does) and prints the collector's
// catalog.
func TestImage(t *testing.T) {
	testenv.RequireRoot(t)
	podman := testenv.RequireTool(t, "podman")
	mk := testenv.RequireTool(t, "make")
	bin := testenv.DistBinary(t)
	root := repoRoot(t)
	image := fmt.Sprintf("localhost/otelctx-test:%d", os.Getpid())

	// This host's platform only: cross-compiling the distribution for the
	// others is make cross's (image-context), which CI runs after make
	// test; here it doubled test/deploy's time on a fresh 2-core machine.
	platform := "linux/" + runtime.GOARCH
	if !slices.Contains(imagePlatforms(t), platform) {
		t.Fatalf("IMAGE_PLATFORMS %v lacks this host's %s", imagePlatforms(t), platform)
	}
	build := exec.Command(mk, "--no-print-directory", "image", "IMAGE="+image, "IMAGE_BIN="+bin, "IMAGE_TOOL="+podman, "IMAGE_PLATFORMS="+platform)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		// The list's images first: removing the list leaves them behind.
		for _, d := range manifestDigests(podman, image) {
			if id, err := exec.Command(podman, "image", "inspect", "--format", "{{.Id}}", image+"@"+d).Output(); err == nil {
				_ = exec.Command(podman, "rmi", "-f", strings.TrimSpace(string(id))).Run()
			}
		}
		_ = exec.Command(podman, "manifest", "rm", image).Run()
		_ = exec.Command(podman, "rmi", "-f", image).Run()
	})
	checkManifestList(t, podman, image, []string{platform})

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
		// No bind of /sys/kernel/btf: the container's own sysfs shows the
		// host's BTF (the DaemonSet relies on that too).
		"--pid=host", "--cap-drop=all", "--cap-add="+imageCaps)
	args = append(args, limits...)
	args = append(args, image,
		// The image's default command, plus this test's isolation.
		"--config", "/etc/otelctx/otelctx.yaml", "--feature-gates=service.profilesSupport,extension.healthcheck.useComponentStatus",
		fmt.Sprintf("--set=extensions::process_ctx::include::pids=[%d]", pid),
		"--set=extensions::process_ctx::catalog_endpoint=unix:/run/otelctx/catalog.sock",
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

	// The CLI in the running container, as `kubectl exec ds/otelctx --
	// otelctx ...` runs it (no shell): its version, and the collector's
	// catalog with the demo in it.
	if out, err := exec.Command(podman, "exec", name, "otelctx", "--version").CombinedOutput(); err != nil || !strings.Contains(string(out), readVersion(t)) {
		t.Errorf("podman exec %s otelctx --version: %v\n%s", name, err, out)
	}
	row := regexp.MustCompile(fmt.Sprintf(`(?m)^%d\s+threadpub\s+otelctx-demo\s`, pid))
	var out []byte
	waitFor(t, 60*time.Second, "the demo in `otelctx list --from` inside the container", func() bool {
		out, _ = exec.Command(podman, "exec", name, "otelctx", "list", "--from", "unix:/run/otelctx/catalog.sock").CombinedOutput()
		return row.Match(out)
	})
	t.Logf("podman exec %s otelctx list --from unix:/run/otelctx/catalog.sock:\n%s", name, out)
}

// checkManifestList: the image is a manifest list of exactly platforms,
// each with the OCI labels and the version of VERSION.
func checkManifestList(t *testing.T, podman, image string, platforms []string) {
	t.Helper()
	out, err := exec.Command(podman, "manifest", "inspect", image).Output()
	if err != nil {
		t.Fatalf("podman manifest inspect %s: %v (not a manifest list?)", image, err)
	}
	var list struct {
		Manifests []struct {
			Digest   string `json:"digest"`
			Platform struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
			} `json:"platform"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range list.Manifests {
		got = append(got, m.Platform.OS+"/"+m.Platform.Architecture)
		labels, err := exec.Command(podman, "image", "inspect", "--format",
			`{{index .Labels "org.opencontainers.image.version"}} {{index .Labels "org.opencontainers.image.source"}} {{.Architecture}}`,
			image+"@"+m.Digest).Output()
		if err != nil {
			t.Errorf("inspect %s: %v", m.Digest, err)
			continue
		}
		if f := strings.Fields(string(labels)); len(f) != 3 || f[0] != readVersion(t) || f[2] != m.Platform.Architecture {
			t.Errorf("%s/%s: OCI labels version and source, and architecture %q, want version %s", m.Platform.OS, m.Platform.Architecture, labels, readVersion(t))
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(platforms))
	if !slices.Equal(got, want) {
		t.Errorf("manifest list of %v, make image builds %v", got, want)
	}
}

// manifestDigests are the digests of a manifest list's images.
func manifestDigests(podman, image string) []string {
	out, err := exec.Command(podman, "manifest", "inspect", image).Output()
	if err != nil {
		return nil
	}
	var list struct {
		Manifests []struct {
			Digest string `json:"digest"`
		} `json:"manifests"`
	}
	if json.Unmarshal(out, &list) != nil {
		return nil
	}
	var ds []string
	for _, m := range list.Manifests {
		ds = append(ds, m.Digest)
	}
	return ds
}

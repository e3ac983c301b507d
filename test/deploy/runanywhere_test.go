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

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestShippedConfigRunsAnywhere: the distribution and config/otelctx.yaml,
// copied to another directory and started from / as the README says, run
// and print the demo's entity events (one line each); the shipped
// configuration names no path relative to the working directory.
func TestShippedConfigRunsAnywhere(t *testing.T) {
	bin := testenv.DistBinary(t)
	root := repoRoot(t)
	dir := t.TempDir()
	copyFile(t, bin, filepath.Join(dir, "otelcol-otelctx"), 0o755)
	copyFile(t, filepath.Join(root, "config", "otelctx.yaml"), filepath.Join(dir, "otelctx.yaml"), 0o644)

	pid := startDemo(t, nil)
	args := append([]string{"--config", filepath.Join(dir, "otelctx.yaml"), "--feature-gates=service.profilesSupport",
		fmt.Sprintf("--set=extensions::process_ctx::include::pids=[%d]", pid)}, isolationFlags...)
	cmd := exec.Command(filepath.Join(dir, "otelcol-otelctx"), args...)
	cmd.Dir = "/"
	col := startProc(t, cmd)
	col.waitOutput(t, "entity event of the demo (service.name otelctx-demo)", entityLine, 30*time.Second)
	res := regexp.MustCompile(`ResourceLog #0 service\.name=otelctx-demo process\.pid=` + fmt.Sprint(pid) + `\b`)
	if !res.MatchString(col.output()) {
		t.Errorf("no one-line ResourceLog with the demo's resource (service.name, process.pid %d)", pid)
	}
	if !col.stop(10 * time.Second) {
		t.Fatal("the collector did not stop within 10s of SIGTERM")
	}
	if ps := col.cmd.ProcessState; ps == nil || !ps.Success() {
		t.Errorf("collector exit: %v", ps)
	}
	if entries, _ := os.ReadDir("/_build"); len(entries) > 0 {
		t.Errorf("the collector started from / wrote into /_build")
	}
}

// TestShippedConfigsNoRelativePaths: no configuration under config/ (but
// make run's own overrides) names a file by a relative path.
func TestShippedConfigsNoRelativePaths(t *testing.T) {
	root := repoRoot(t)
	files, _ := filepath.Glob(filepath.Join(root, "config", "*.yaml"))
	more, _ := filepath.Glob(filepath.Join(root, "deploy", "*", "*.yaml"))
	files = append(files, more...)
	pathKey := regexp.MustCompile(`(?m)^\s*(path|file|directory|storage)\s*:\s*(\S+)`)
	for _, f := range files {
		// make run's overrides, and builder recipes (path: is the module
		// checkout the builder runs in).
		if strings.HasPrefix(filepath.Base(f), "make-run") || strings.HasPrefix(filepath.Base(f), "builder-config") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range pathKey.FindAllStringSubmatch(string(b), -1) {
			v := strings.Trim(m[2], `"'`)
			if !strings.HasPrefix(v, "/") && !strings.HasPrefix(v, "${") {
				t.Errorf("%s: %s: %s is relative to the working directory", f, m[1], v)
			}
		}
	}
}

// TestMakeRunConfigsValidate: make run's overrides merge over the shipped
// configuration into a valid one (with and without RUN_VERBOSE=1).
func TestMakeRunConfigsValidate(t *testing.T) {
	bin := testenv.DistBinary(t)
	root := repoRoot(t)
	for _, files := range [][]string{
		{"otelctx.yaml", "make-run.yaml"},
		{"otelctx.yaml", "make-run.yaml", "make-run-verbose.yaml"},
	} {
		args := []string{"validate", "--feature-gates=service.profilesSupport"}
		for _, f := range files {
			args = append(args, "--config", filepath.Join(root, "config", f))
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "OTELCTX_RUN_DIR="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%v: %v\n%s", files, err, out)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package testenv decides what a test does when the machine lacks something
// it needs (root, BPF, a compiler): skip with a clear message locally, fail
// under CI=true, where a skipped conformance test would be a hidden failure.
package testenv

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// InCI reports whether the tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing skips the test, or fails it under CI, because what is missing.
func Missing(tb testing.TB, what string) {
	tb.Helper()
	if InCI() {
		tb.Fatalf("CI=true and %s: this test must run in CI (make test installs what it needs)", what)
	}
	tb.Skipf("skipping: %s (set up by make test; under CI=true this fails)", what)
}

// RequireRoot needs uid 0 (process_vm_readv and ptrace on other users'
// processes, BPF, writing ns_last_pid).
func RequireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		Missing(tb, "not running as root")
	}
}

// RequireTool needs an executable on PATH and returns its path.
func RequireTool(tb testing.TB, name string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(tb, name+" is not installed")
	}
	return p
}

// RequirePIDNamespace needs to start a process in a new PID namespace (what
// `unshare -p -f` does: root, and a kernel and sandbox that allow
// CLONE_NEWPID): it starts `true` that way once per call.
func RequirePIDNamespace(tb testing.TB) {
	tb.Helper()
	RequireRoot(tb)
	p := RequireTool(tb, "true")
	cmd := exec.Command(p)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	if err := cmd.Run(); err != nil {
		Missing(tb, "cannot start a process in a new PID namespace ("+err.Error()+")")
	}
}

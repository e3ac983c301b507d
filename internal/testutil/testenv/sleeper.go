// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Sleeper starts a real process (sleep) whose environment is exactly env,
// one that publishes nothing, killed and reaped when the test ends.
func Sleeper(t testing.TB, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(RequireTool(t, "sleep"), "3600")
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Start returns once the exec is past its point of no return, before
	// the kernel has laid out the new arguments and environment: until
	// then /proc/PID/environ reads empty.
	environ := fmt.Sprintf("/proc/%d/environ", cmd.Process.Pid)
	want := 0
	for _, e := range env {
		want += len(e) + 1
	}
	Eventually(t, "the sleeper's environment laid out", func() bool {
		b, err := os.ReadFile(environ)
		return err == nil && len(b) == want
	})
	return cmd
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testenv

import (
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
	return cmd
}

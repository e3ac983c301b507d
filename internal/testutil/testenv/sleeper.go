// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testenv

import (
	"fmt"
	"io"
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

// Execer is a shell whose environment is exactly env until Exec, when it
// execs env(1) with OTEL_SERVICE_NAME=after, which execs sleep: a new
// image and environment under the same PID and start time.
type Execer struct {
	Cmd   *exec.Cmd
	stdin io.WriteCloser
}

// StartExecer starts an Execer, killed and reaped when the test ends.
func StartExecer(t testing.TB, env ...string) *Execer {
	t.Helper()
	cmd := exec.Command(RequireTool(t, "sh"), "-c", "read line; exec env OTEL_SERVICE_NAME=after sleep 3600")
	cmd.Env = env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &Execer{Cmd: cmd, stdin: stdin}
}

// Exec makes the shell exec the program.
func (e *Execer) Exec(t testing.TB) {
	t.Helper()
	if _, err := e.stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
}

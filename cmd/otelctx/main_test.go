// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// cliPath is the otelctx binary built once by TestMain: the tests run it as
// a subprocess, as a user would.
var cliPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "otelctx-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cliPath = filepath.Join(dir, "otelctx")
	build := testenv.GoBuild(".", "-o", cliPath, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building otelctx: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	threadpub.RemoveBuilds()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

// otelctx runs the CLI with args and returns what it printed and its exit code.
func otelctx(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliPath, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
	default:
		t.Fatalf("otelctx %v: %v\nstderr: %s", args, err, r.stderr)
	}
	return r
}

// startOtelctx runs the CLI with args in the background; wait returns
// what it printed and its exit code, once it has written a stderr line
// containing each of marks (waitLine) or exited.
type runningCLI struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	lines  chan string
	stderr strings.Builder
}

func startOtelctx(t *testing.T, args ...string) *runningCLI {
	t.Helper()
	c := &runningCLI{cmd: exec.Command(cliPath, args...), lines: make(chan string, 1024)}
	c.cmd.Stdout = &c.stdout
	errPipe, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.cmd.Process.Kill() })
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	return c
}

// waitLine returns once the CLI wrote a stderr line containing mark; its
// exit first, or a minute (scaled), fails the test.
func (c *runningCLI) waitLine(t *testing.T, mark string) {
	t.Helper()
	deadline := time.After(testenv.Scaled(time.Minute))
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("otelctx exited before writing %q: %s", mark, c.stderr.String())
			}
			c.stderr.WriteString(l + "\n")
			if strings.Contains(l, mark) {
				return
			}
		case <-deadline:
			t.Fatalf("otelctx wrote no %q within a minute: %s", mark, c.stderr.String())
		}
	}
}

// wait returns the CLI's output and exit code.
func (c *runningCLI) wait(t *testing.T) result {
	t.Helper()
	for l := range c.lines {
		c.stderr.WriteString(l + "\n")
	}
	err := c.cmd.Wait()
	r := result{stdout: c.stdout.String(), stderr: c.stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
	default:
		t.Fatalf("otelctx: %v\nstderr: %s", err, r.stderr)
	}
	return r
}

// mustSucceed runs the CLI and fails the test unless it exits 0.
func mustSucceed(t *testing.T, args ...string) result {
	t.Helper()
	r := otelctx(t, args...)
	if r.code != 0 {
		t.Fatalf("otelctx %v: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
	}
	return r
}

// failure checks that the CLI failed (exit 1) with exactly one line on
// stderr and nothing on stdout, and returns that line.
func failure(t *testing.T, args ...string) string {
	t.Helper()
	r := otelctx(t, args...)
	if r.code != 1 {
		t.Fatalf("otelctx %v: exit %d, want 1\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("otelctx %v: stdout %q, want nothing", args, r.stdout)
	}
	line, ok := strings.CutSuffix(r.stderr, "\n")
	if !ok || strings.Contains(line, "\n") || !strings.HasPrefix(line, "otelctx: ") {
		t.Fatalf("otelctx %v: stderr %q, want one line starting with \"otelctx: \"", args, r.stderr)
	}
	return line
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string // in the first stderr line
	}{
		{nil, "no command given"},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"dump"}, "expected one PID, got 0 arguments"},
		{[]string{"dump", "1", "2"}, "expected one PID, got 2 arguments"},
		{[]string{"dump", "abc"}, `invalid PID "abc"`},
		{[]string{"dump", "0"}, `invalid PID "0"`},
		{[]string{"dump", "--bogus", "1"}, "flag provided but not defined: -bogus"},
		{[]string{"dump", "--json"}, "expected one PID, got 0 arguments"},
		{[]string{"list", "extra"}, `unexpected argument "extra"`},
		{[]string{"--json", "list"}, "flag provided but not defined: -json"},
		{[]string{"--max-payload-size", "0", "list"}, "--max-payload-size must be between 1 and 4294967295"},
		{[]string{"list", "--max-payload-size", "4294967296"}, "--max-payload-size must be between 1 and 4294967295"},
		{[]string{"--max-payload-size", "lots", "list"}, `invalid value "lots" for flag -max-payload-size`},
		{[]string{"help", "nope"}, `unknown command "nope"`},
		{[]string{"help", "list", "dump"}, "help takes at most one command"},
	} {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			t.Parallel()
			r := otelctx(t, tc.args...)
			if r.code != 2 {
				t.Fatalf("exit %d, want 2\nstderr: %s", r.code, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
			lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
			if !strings.HasPrefix(lines[0], "otelctx") || !strings.Contains(lines[0], tc.want) {
				t.Errorf("first stderr line %q, want it to contain %q", lines[0], tc.want)
			}
			if !strings.Contains(r.stderr, "\nusage: otelctx ") {
				t.Errorf("stderr has no usage line:\n%s", r.stderr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	// Every registered subcommand, whatever file defines it, must be listed.
	var names []string
	for name := range commands {
		names = append(names, name)
	}
	if len(names) < 2 {
		t.Fatalf("commands registered: %v", names)
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		r := mustSucceed(t, args...)
		_, list, ok := strings.Cut(r.stdout, "\ncommands:\n")
		if !ok {
			t.Fatalf("otelctx %v: no command list:\n%s", args, r.stdout)
		}
		for _, name := range append(names, "help") {
			if !strings.Contains(list, "\n  "+name+" ") && !strings.HasPrefix(list, "  "+name+" ") {
				t.Errorf("otelctx %v does not list %q:\n%s", args, name, r.stdout)
			}
		}
		for _, flag := range []string{"-proc", "-max-payload-size", "-v"} {
			if !strings.Contains(r.stdout, "  "+flag) {
				t.Errorf("otelctx %v does not document %s:\n%s", args, flag, r.stdout)
			}
		}
	}
	for _, name := range names {
		for _, args := range [][]string{{"help", name}, {name, "-h"}, {"-v", name, "--help"}} {
			r := mustSucceed(t, args...)
			if want := "usage: otelctx " + name + " [flags]"; !strings.HasPrefix(r.stdout, want) {
				t.Errorf("otelctx %v: output does not start with %q:\n%s", args, want, r.stdout)
			}
			for _, flag := range []string{"-json", "-proc", "-max-payload-size", "-v"} {
				if !strings.Contains(r.stdout, "  "+flag) {
					t.Errorf("otelctx %v does not document %s:\n%s", args, flag, r.stdout)
				}
			}
		}
	}
}

func TestDumpNoSuchProcess(t *testing.T) {
	t.Parallel()
	// PIDs are below pid_max: pid_max itself never exists.
	pidMax := 4 << 20 // PID_MAX_LIMIT on 64-bit
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if _, err := fmt.Sscan(string(b), &pidMax); err != nil {
			t.Fatal(err)
		}
	}
	got := failure(t, "dump", fmt.Sprint(pidMax))
	if want := fmt.Sprintf("otelctx: pid %d: no such process", pidMax); got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

func TestDumpSelfHasNoContext(t *testing.T) {
	t.Parallel()
	// The test process itself (the CLI's parent, same user) publishes nothing.
	pid := os.Getpid()
	got := failure(t, "dump", "--json", fmt.Sprint(pid))
	if want := fmt.Sprintf("otelctx: pid %d: no process context", pid); got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

func TestBadProcRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{{"--proc", dir, "list"}, {"list", "--proc", dir}, {"dump", "1", "--proc", dir}} {
		got := failure(t, args...)
		if want := "otelctx: procfs at " + dir + ": "; !strings.HasPrefix(got, want) {
			t.Errorf("otelctx %v: stderr %q, want prefix %q", args, got, want)
		}
	}
}

func TestDumpThreadID(t *testing.T) {
	t.Parallel()
	// The test process has several threads; one that is not the main
	// thread is not a process.
	pid := os.Getpid()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	tid := 0
	for _, task := range tasks {
		if n, _ := strconv.Atoi(task.Name()); n != pid && n > 0 {
			tid = n
			break
		}
	}
	if tid == 0 {
		t.Fatalf("test process %d has a single thread: %v", pid, tasks)
	}
	got := failure(t, "dump", strconv.Itoa(tid))
	if want := fmt.Sprintf("otelctx: pid %d: a thread of process %d, not a process (try: otelctx dump %d)", tid, pid, pid); got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package distrun runs the built distribution (testenv.DistBinary) as a
// child of a test: its output goes to a log file, it dies with the test
// binary, it is killed when the test ends, and its log is shown when the
// test failed.
package distrun

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Collector is one running distribution process.
type Collector struct {
	Cmd     *exec.Cmd
	LogPath string
	done    chan struct{}
	err     error // cmd.Wait's result, once done is closed
}

// Start runs bin with args, its stdout and stderr in logPath.
func Start(tb testing.TB, bin, logPath string, args ...string) *Collector {
	tb.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The collector must not outlive a test binary that dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", bin, err)
	}
	c := &Collector{Cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	tb.Cleanup(func() {
		if !c.Exited() {
			_ = cmd.Process.Kill()
			<-c.done
		}
		if tb.Failed() {
			tb.Logf("collector output:\n%s", c.Log())
		}
	})
	return c
}

// Log is the collector's output so far.
func (c *Collector) Log() string {
	b, err := os.ReadFile(c.LogPath)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// Exited reports whether the collector has exited.
func (c *Collector) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Err is how the collector exited (nil: status 0), once Exited.
func (c *Collector) Err() error {
	if !c.Exited() {
		return nil
	}
	return c.err
}

// Stop sends SIGTERM and waits up to d: nil when the collector exited with
// status 0 within d.
func (c *Collector) Stop(d time.Duration) error {
	if err := c.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM: %w", err)
	}
	select {
	case <-c.done:
	case <-time.After(d):
		return fmt.Errorf("collector still running %v after SIGTERM", d)
	}
	if c.err != nil {
		var ee *exec.ExitError
		if errors.As(c.err, &ee) {
			return fmt.Errorf("collector exited with %v after SIGTERM, want status 0", ee.ProcessState)
		}
		return fmt.Errorf("collector: %w", c.err)
	}
	return nil
}

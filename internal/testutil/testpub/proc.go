// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testpub

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/proc/procstat"
)

// Builds caches one build per C library for the test binary.
type Builds struct {
	mu    sync.Mutex
	built map[Libc]string
}

// Get: a missing compiler skips (fails under CI=true).
func (b *Builds) Get(tb testing.TB, libc Libc, compile func(cc string) string) string {
	tb.Helper()
	cc := Compiler(tb, libc)
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.built[libc]; ok {
		return p
	}
	out := compile(cc)
	if b.built == nil {
		b.built = map[Libc]string{}
	}
	b.built[libc] = out
	return out
}

// Proc is a C test program driven by lines: a command in, one reply out.
// It is killed when the test ends.
type Proc struct {
	tb    testing.TB
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}

	PID     int
	Timeout time.Duration
}

// RunProc: env nil inherits; name prefixes failure messages.
func RunProc(tb testing.TB, name string, timeout time.Duration, env []string, path string, args ...string) *Proc {
	tb.Helper()
	return RunProcAttr(tb, name, timeout, env, nil, path, args...)
}

// RunProcAttr: e.g. CLONE_NEWPID for PID 1 of a new namespace (PID stays ours).
func RunProcAttr(tb testing.TB, name string, timeout time.Duration, env []string, attr *syscall.SysProcAttr, path string, args ...string) *Proc {
	tb.Helper()
	if env != nil {
		env = append(os.Environ(), env...)
	}
	return run(tb, name, timeout, env, attr, path, args...)
}

// RunProcEnv runs path with exactly env, nothing inherited (a process
// whose environment is the test's subject).
func RunProcEnv(tb testing.TB, name string, timeout time.Duration, env []string, path string, args ...string) *Proc {
	tb.Helper()
	return run(tb, name, timeout, append([]string{}, env...), nil, path, args...)
}

func run(tb testing.TB, name string, timeout time.Duration, env []string, attr *syscall.SysProcAttr, path string, args ...string) *Proc {
	tb.Helper()
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = attr
	cmd.Env = env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &Proc{tb: tb, name: name, cmd: cmd, stdin: stdin, lines: make(chan string, 64), done: make(chan struct{}), PID: cmd.Process.Pid, Timeout: timeout}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	tb.Cleanup(p.Kill)
	return p
}

// ReadLine: an exit, or no line within Timeout, fails the test.
func (p *Proc) ReadLine() string {
	p.tb.Helper()
	return p.ReadLineWhile(nil)
}

// maxProgressWaits bounds ReadLineWhile: a program that keeps running but
// never answers still fails.
const maxProgressWaits = 30

// ReadLineWhile is ReadLine for a reply that comes after CPU work (spans
// defined in CPU time): each Timeout without a line is forgiven while
// progress says the program ran since the last call, up to
// maxProgressWaits of them. A starved program is slow, not hung.
func (p *Proc) ReadLineWhile(progress func() bool) string {
	p.tb.Helper()
	for range maxProgressWaits {
		select {
		case l, ok := <-p.lines:
			if !ok {
				p.tb.Fatalf("%s %d: exited", p.name, p.PID)
			}
			return l
		case <-time.After(p.Timeout):
			if progress == nil || !progress() {
				p.tb.Fatalf("%s %d: no reply within %v", p.name, p.PID, p.Timeout)
			}
		}
	}
	p.tb.Fatalf("%s %d: no reply within %d × %v, running all along", p.name, p.PID, maxProgressWaits, p.Timeout)
	return ""
}

// Running is a progress function for ReadLineWhile: whether the process
// used CPU time since the previous call (the first call compares with
// the process's start).
func (p *Proc) Running() func() bool {
	var last uint64
	return func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
		if err != nil {
			return false
		}
		st, err := procstat.Parse(b)
		if err != nil {
			return false
		}
		ran := st.UTime+st.STime > last
		last = st.UTime + st.STime
		return ran
	}
}

func (p *Proc) Ask(format string, args ...any) (cmd, reply string) {
	p.tb.Helper()
	cmd = fmt.Sprintf(format, args...)
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		p.tb.Fatalf("%s %d: %s: %v", p.name, p.PID, cmd, err)
	}
	return cmd, p.ReadLine()
}

// AskWhile is Ask whose reply may wait on CPU work (ReadLineWhile).
func (p *Proc) AskWhile(progress func() bool, format string, args ...any) (cmd, reply string) {
	p.tb.Helper()
	cmd = fmt.Sprintf(format, args...)
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		p.tb.Fatalf("%s %d: %s: %v", p.name, p.PID, cmd, err)
	}
	return cmd, p.ReadLineWhile(progress)
}

// Stop sends cmd, whose reply is the program's exit, and reaps it.
func (p *Proc) Stop(cmd string, timeout time.Duration) {
	p.tb.Helper()
	_, _ = io.WriteString(p.stdin, cmd+"\n")
	p.Wait(timeout)
}

func (p *Proc) Wait(timeout time.Duration) {
	p.tb.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.tb.Fatalf("%s %d did not exit", p.name, p.PID)
	}
}

func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

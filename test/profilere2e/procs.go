// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procs owns every process the run starts: each runs in its own process
// group (so that a terminal's Ctrl-C reaches only this program, which then
// stops them in order) with SIGKILL as its parent-death signal (so that
// nothing outlives this program even if it is killed outright).
type procs struct {
	mu   sync.Mutex
	list []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been reaped
	err  error         // its exit status, once done is closed
}

// start starts cmd (its Stdout/Stderr already set) and registers it.
func (ps *procs) start(name string, cmd *exec.Cmd) (*proc, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to p's process group, and SIGKILL if it has not
// exited within grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	}
	// Whatever the group leader left behind in its group.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// stopAll stops every process, the last started first.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	list := ps.list
	ps.list = nil
	ps.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		list[i].stop(10 * time.Second)
	}
}

// lineWatcher copies a process's output to a log file and remembers
// whether a line containing a given text has been seen.
type lineWatcher struct {
	mu   sync.Mutex
	seen map[string]chan struct{}
}

func newLineWatcher(want ...string) *lineWatcher {
	w := &lineWatcher{seen: map[string]chan struct{}{}}
	for _, s := range want {
		w.seen[s] = make(chan struct{})
	}
	return w
}

// copy reads r line by line into log until EOF.
func (w *lineWatcher) copy(r io.Reader, log io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(log, line)
		w.mu.Lock()
		for s, ch := range w.seen {
			if ch != nil && strings.Contains(line, s) {
				close(ch)
				w.seen[s] = nil
			}
		}
		w.mu.Unlock()
	}
}

// wait waits for a line containing s (registered in newLineWatcher).
func (w *lineWatcher) wait(ctx context.Context, s string, timeout time.Duration, p *proc) error {
	w.mu.Lock()
	ch, ok := w.seen[s]
	w.mu.Unlock()
	if !ok {
		return fmt.Errorf("internal: %q not watched", s)
	}
	if ch == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case <-ch:
		return nil
	case <-p.done:
		return fmt.Errorf("%s exited (%v) before logging %q", p.name, p.err, s)
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%s did not log %q within %s", p.name, s, timeout)
		}
		return ctx.Err()
	}
}

// publisher drives testdata/publishers/threadpub.c over its stdin line
// protocol (see the command list at the top of threadpub.c).
type publisher struct {
	p     *proc
	pid   int
	stdin io.WriteCloser
	lines chan string
	ready []string // the first line's fields after the PID
}

func startPublisher(ps *procs, cmd *exec.Cmd, logPath string) (*publisher, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	p, err := ps.start("publisher", cmd)
	if err != nil {
		logf.Close()
		return nil, err
	}
	pub := &publisher{p: p, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			pub.lines <- sc.Text()
		}
		close(pub.lines)
		logf.Close()
	}()
	f, err := pub.reply(context.Background(), 30*time.Second)
	if err != nil {
		return nil, err
	}
	if len(f) < 2 || f[0] != "ready" {
		return nil, fmt.Errorf("publisher: unexpected first line %q", f)
	}
	pub.ready = f[2:]
	if _, err := fmt.Sscan(f[1], &pub.pid); err != nil {
		return nil, fmt.Errorf("publisher: %q: %w", f, err)
	}
	return pub, nil
}

func (pub *publisher) reply(ctx context.Context, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case line, ok := <-pub.lines:
		if !ok {
			<-pub.p.done
			return nil, fmt.Errorf("publisher exited (%v)", pub.p.err)
		}
		return strings.Fields(line), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("publisher: no answer: %w", ctx.Err())
	}
}

// do sends one command and returns the fields after "ok".
func (pub *publisher) do(ctx context.Context, timeout time.Duration, format string, args ...any) ([]string, error) {
	cmd := fmt.Sprintf(format, args...)
	if _, err := fmt.Fprintln(pub.stdin, cmd); err != nil {
		return nil, fmt.Errorf("publisher: %s: %w", cmd, err)
	}
	f, err := pub.reply(ctx, timeout)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	if len(f) == 0 || f[0] != "ok" {
		return nil, fmt.Errorf("publisher: %s: %q", cmd, f)
	}
	return f[1:], nil
}

// exit sends "exit" and waits for the process to be reaped.
func (pub *publisher) exit(ctx context.Context) (time.Time, error) {
	if _, err := fmt.Fprintln(pub.stdin, "exit"); err != nil {
		return time.Time{}, err
	}
	select {
	case <-pub.p.done:
		return time.Now(), nil
	case <-time.After(10 * time.Second):
		return time.Time{}, errors.New("publisher did not exit within 10s of the exit command")
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

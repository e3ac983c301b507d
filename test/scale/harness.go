// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

var errInterrupted = errors.New("interrupted")

// harness holds what a run started and changed, to undo it on every path.
type harness struct {
	opt     options
	dir     string // temporary: scalepub, configurations, collector logs
	pub     string
	port    int // the collector's Prometheus telemetry
	stop    chan struct{}
	stopped sync.Once

	mu      sync.Mutex
	procs   []*proc
	sysctls []sysctl
	results []result
	budget  []budgetRow
}

// proc is a process this program started, leader of its own process group
// (scalepub's children are in it): killing the group ends them all, and
// PDEATHSIG ends them should this program die without its cleanup.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

type sysctl struct{ path, old string }

func (h *harness) setup() error {
	h.stop = make(chan struct{})
	dir, err := os.MkdirTemp("", "otelctx-scale-")
	if err != nil {
		return err
	}
	h.dir = dir
	src := filepath.Join(dir, "scalepub.c")
	if err := os.WriteFile(src, scalepubC, 0o600); err != nil {
		return err
	}
	h.pub = filepath.Join(dir, "scalepub")
	out, err := exec.Command(h.opt.cc, "-O2", "-Wall", "-pthread", "-o", h.pub, src).CombinedOutput()
	if err != nil {
		return fmt.Errorf("compiling scalepub.c: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	h.port = l.Addr().(*net.TCPAddr).Port
	return l.Close()
}

// scalepubC is the source of the processes the scenarios start (in
// testdata: the go tool refuses C files in a package without cgo).
//
//go:embed testdata/scalepub.c
var scalepubC []byte

// interrupt stops the run: waits end with errInterrupted, and the deferred
// cleanup in run kills what was started.
func (h *harness) interrupt() { h.stopped.Do(func() { close(h.stop) }) }

// pause waits d unless interrupted.
func (h *harness) pause(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-h.stop:
		return errInterrupted
	}
}

// start runs a process in its own process group, its output to log (nil:
// discarded).
func (h *harness) start(name string, stdout io.Writer, path string, args ...string) (*proc, error) {
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = stdout, stdout
	return h.startCmd(name, cmd)
}

// startCmd starts cmd (its I/O set by the caller) as start does.
func (h *harness) startCmd(name string, cmd *exec.Cmd) (*proc, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pdeathsig = true, syscall.SIGKILL
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.stop:
		return nil, errInterrupted
	default:
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	h.procs = append(h.procs, p)
	return p, nil
}

// kill ends p's process group: SIGTERM first when graceful (the
// collector), SIGKILL after 15 s or at once; then waits for the group to
// be gone (scalepub's children die with it).
func (h *harness) kill(p *proc, graceful bool) {
	pgid := p.cmd.Process.Pid
	if graceful {
		_ = syscall.Kill(pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			fmt.Fprintf(os.Stderr, "scale: %s did not stop on SIGTERM in 15 s, killing it\n", p.name)
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
	deadline := time.Now().Add(2 * time.Minute)
	for syscall.Kill(-pgid, 0) == nil {
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "scale: process group %d (%s) still has members after SIGKILL (unreaped?)\n", pgid, p.name)
			return
		}
		time.Sleep(100 * time.Millisecond) // polling a condition (group empty), with a deadline
	}
}

// stopAll kills every process started, the collector gracefully.
func (h *harness) stopAll() {
	h.mu.Lock()
	procs := h.procs
	h.procs = nil
	h.mu.Unlock()
	for _, p := range procs {
		h.kill(p, p.name == "collector")
	}
}

// cleanup undoes everything: processes, sysctls, the temporary directory
// (kept, with its path printed, when a collector log may explain a
// failure).
func (h *harness) cleanup() {
	h.interrupt()
	h.stopAll()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.sysctls) - 1; i >= 0; i-- {
		s := h.sysctls[i]
		if err := os.WriteFile(s.path, []byte(s.old), 0); err != nil {
			fmt.Fprintf(os.Stderr, "scale: restoring %s to %s: %v\n", s.path, s.old, err)
		} else {
			fmt.Fprintf(os.Stderr, "scale: %s restored to %s\n", s.path, s.old)
		}
	}
	h.sysctls = nil
	if h.dir != "" {
		fmt.Fprintf(os.Stderr, "scale: collector logs and configurations in %s\n", h.dir)
	}
}

// atLeast raises a sysctl (a /proc/sys path) to min, to be restored.
func (h *harness) atLeast(path string, min int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	old := strings.TrimSpace(string(b))
	cur, err := strconv.Atoi(old)
	if err != nil {
		return fmt.Errorf("%s: %q", path, old)
	}
	if cur >= min {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := os.WriteFile(path, []byte(strconv.Itoa(min)), 0); err != nil {
		return fmt.Errorf("raising %s from %d to %d: %w", path, cur, min, err)
	}
	h.sysctls = append(h.sysctls, sysctl{path: path, old: old})
	fmt.Fprintf(os.Stderr, "scale: %s raised from %d to %d (restored at the end)\n", path, cur, min)
	return nil
}

// tasks makes room for n more tasks (processes and threads).
func (h *harness) tasks(n int) error {
	if err := h.atLeast("/proc/sys/kernel/pid_max", min(4194304, max(32768, 4*n))); err != nil {
		return err
	}
	return h.atLeast("/proc/sys/kernel/threads-max", 2*n)
}

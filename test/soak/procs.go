// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

func (s *soak) write(name, text string) string {
	p := filepath.Join(s.dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		panic(err) // the temporary directory was just made
	}
	return p
}

func (s *soak) compile(out string, args ...string) error {
	b, err := exec.Command(s.opt.cc, append([]string{"-o", out}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("compiling %s: %v\n%s", out, err, b)
	}
	return nil
}

func (s *soak) startDist(name string, env []string, args ...string) (*proc, error) {
	log, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own descriptor
	return s.start(name, log, env, s.opt.dist, args...)
}

// start runs a process in its own process group (killed with it), its
// output to log (nil: discarded).
func (s *soak) start(name string, log io.Writer, env []string, path string, args ...string) (*proc, error) {
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.stop:
		return nil, errInterrupted
	default:
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	s.procs = append(s.procs, p)
	return p, nil
}

var errInterrupted = errors.New("interrupted")

func (s *soak) interrupt() { s.once.Do(func() { close(s.stop) }) }

func (s *soak) pause(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-s.stop:
		return errInterrupted
	}
}

func (s *soak) waitFor(limit time.Duration, what string, cond func() bool) error {
	for end := time.Now().Add(limit); !cond(); {
		if time.Now().After(end) {
			return fmt.Errorf("%s: not there after %v (logs in %s)", what, limit, s.dir)
		}
		if err := s.pause(200 * time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// kill ends p's process group: SIGTERM first for the collectors, then
// SIGKILL, and waits for p.
func (s *soak) kill(p *proc) {
	pgid := p.cmd.Process.Pid
	if p.name == "agent" || p.name == "gateway" {
		_ = syscall.Kill(pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			fmt.Fprintf(os.Stderr, "soak: %s did not stop on SIGTERM in 15 s, killing it\n", p.name)
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
}

func (s *soak) cleanup() {
	s.interrupt()
	s.mu.Lock()
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	// The agent first: its gateway must outlive it to take its last batch.
	sort.SliceStable(procs, func(i, j int) bool { return procs[i].name == "agent" && procs[j].name != "agent" })
	for _, p := range procs {
		s.kill(p)
	}
	if s.dir != "" {
		fmt.Fprintf(os.Stderr, "soak: logs and configurations in %s\n", s.dir)
	}
}

// replaceDemos replaces the oldest thread publisher every demoLife/demos.
func (s *soak) replaceDemos(demos []*proc, threadpub string) {
	step := s.opt.demoLife / time.Duration(max(len(demos), 1))
	for i := 0; ; i = (i + 1) % len(demos) {
		if s.pause(step) != nil {
			return
		}
		old := demos[i]
		s.mu.Lock()
		for k, p := range s.procs {
			if p == old {
				s.procs = append(s.procs[:k], s.procs[k+1:]...)
				break
			}
		}
		s.mu.Unlock()
		s.kill(old)
		p, err := s.start("demo", nil, nil, threadpub, "--demo", "--demo-threads", "2", "--demo-busy", "20")
		if err != nil {
			return
		}
		demos[i] = p
	}
}

// freePorts returns n loopback ports free now (held together, so distinct).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

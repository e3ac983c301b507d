// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// repoRoot is the repository's root directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func copyFile(t testing.TB, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

var (
	demoOnce sync.Once
	demoPath string
	demoErr  error
	demoDir  string // holds demoPath (TestMain removes it)
)

// TestMain removes the demo publisher built once for all tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if demoDir != "" {
		os.RemoveAll(demoDir)
	}
	os.Exit(code)
}

// demoBinary compiles the demo publisher of make run (testdata/publishers
// --demo) once per test binary.
func demoBinary(t testing.TB) string {
	t.Helper()
	cc := testenv.RequireTool(t, "gcc")
	root := repoRoot(t)
	demoOnce.Do(func() {
		dir, err := os.MkdirTemp("", "otelctx-deploy-demo-")
		if err != nil {
			demoErr = err
			return
		}
		demoDir = dir
		demoPath = filepath.Join(dir, "threadpub")
		out, err := exec.Command(cc, "-O2", "-pthread", "-rdynamic", "-o", demoPath,
			filepath.Join(root, "testdata/publishers/threadpub.c"),
			filepath.Join(root, "testdata/publishers/otelctx_tls.c")).CombinedOutput()
		if err != nil {
			demoErr = fmt.Errorf("gcc: %v\n%s", err, out)
		}
	})
	if demoErr != nil {
		t.Fatal(demoErr)
	}
	return demoPath
}

// startDemo starts the demo publisher (busy threads switching spans, the
// process context of the service otelctx-demo) and returns its PID. It
// runs as uid/gid when cred is set, and is killed when the test ends.
func startDemo(t testing.TB, cred *syscall.Credential) int {
	t.Helper()
	bin := demoBinary(t)
	if cred != nil {
		// The demo runs as another user: its directory and file must be
		// readable and executable by them.
		_ = os.Chmod(filepath.Dir(bin), 0o755)
	}
	cmd := exec.Command(bin, "--demo", "--demo-threads", "1", "--demo-busy", "20")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start demo: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// proc is a running command whose combined output is collected.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
}

// startProc starts cmd, collecting its output; it is killed when the test
// ends, and its output logged if the test failed.
func startProc(t testing.TB, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, done: make(chan struct{})}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	w.Close()
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text())
			p.out.WriteByte('\n')
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(5 * time.Second)
		if t.Failed() {
			t.Logf("output of %s:\n%s", strings.Join(cmd.Args, " "), p.output())
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to timeout, then kills. It reports
// whether the process exited after SIGTERM.
func (p *proc) stop(timeout time.Duration) bool {
	if p.exited() {
		return true
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return false
	}
}

// waitOutput waits until the output matches re, the process exits, or
// timeout passes; it returns the first match.
func (p *proc) waitOutput(t testing.TB, what string, re *regexp.Regexp, timeout time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		if m := re.FindString(p.output()); m != "" {
			return m
		}
		select {
		case <-p.done:
			if m := re.FindString(p.output()); m != "" {
				return m
			}
			t.Fatalf("exited before %s (%v)", what, p.cmd.ProcessState)
		case <-ctx.Done():
			t.Fatalf("no %s within %v", what, timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// entityLine matches the demo's service.instance entity event as the
// debug exporter prints it at normal verbosity.
var entityLine = regexp.MustCompile(`otel\.entity\.event\.type=entity_state otel\.entity\.type=service\.instance otel\.entity\.id=\{"service\.name":"otelctx-demo"\}`)

// isolationFlags keep a collector started by a test off the ports a
// person's `make run` or another test uses: OTLP on ephemeral ports, no
// telemetry endpoint.
var isolationFlags = []string{
	"--set=receivers::otlp::protocols::grpc::endpoint=127.0.0.1:0",
	"--set=receivers::otlp::protocols::http::endpoint=127.0.0.1:0",
	"--set=service::telemetry::metrics::level=none",
}

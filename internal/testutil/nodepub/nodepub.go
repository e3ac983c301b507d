// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package nodepub runs the Node.js publisher of the tests
// (testdata/pub.js): a real Node release traced by the real
// dd-trace with DD_TRACE_OTEL_CTX_ENABLED=true, both installed from npm by
// `make node-deps` into _build/node.
package nodepub

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// Majors are the Node releases make node-deps installs.
var Majors = []int{22, 24, 26}

// Root is the repository root (where go.mod is), found from the working
// directory of the test.
func Root(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("nodepub: no go.mod above the working directory")
		}
		dir = parent
	}
}

func npmArch() string {
	if runtime.GOARCH == "arm64" {
		return "arm64"
	}
	return "x64"
}

// Node is the node binary of release major, or the test skips (fails under
// CI) when make node-deps has not installed it.
func Node(tb testing.TB, major int) string {
	tb.Helper()
	p := filepath.Join(Root(tb), "_build", "node", fmt.Sprintf("node-%d", major), "node_modules", "node-linux-"+npmArch(), "bin", "node")
	if _, err := os.Stat(p); err != nil {
		testenv.Missing(tb, fmt.Sprintf("Node %d is not installed in _build/node (make node-deps)", major))
	}
	return p
}

// OTelSDKModules is the node_modules holding the OpenTelemetry SDK for
// Node (@opentelemetry/api, sdk-trace, resources, context-async-hooks).
func OTelSDKModules(tb testing.TB) string {
	tb.Helper()
	p := filepath.Join(Root(tb), "_build", "node", "otelsdk", "node_modules")
	if _, err := os.Stat(filepath.Join(p, "@opentelemetry", "sdk-trace", "package.json")); err != nil {
		testenv.Missing(tb, "the OpenTelemetry SDK for Node is not installed in _build/node (make node-deps)")
	}
	return p
}

// Modules is the node_modules holding dd-trace and @datadog/pprof.
func Modules(tb testing.TB) string {
	tb.Helper()
	p := filepath.Join(Root(tb), "_build", "node", "tracer", "node_modules")
	if _, err := os.Stat(filepath.Join(p, "dd-trace", "package.json")); err != nil {
		testenv.Missing(tb, "dd-trace is not installed in _build/node (make node-deps)")
	}
	return p
}

// Publisher is one running pub.js.
type Publisher struct {
	PID int
	Dir string // where the test's files go (the spin stops, the truth)

	cmd    *exec.Cmd
	lines  chan string
	stderr *strings.Builder
	mu     sync.Mutex
}

// Start runs pub.js with node and args (mode first; the directory is
// added after the mode) and extra environment entries. The process is
// killed at the test's end.
func Start(tb testing.TB, node string, env []string, mode string, args ...string) *Publisher {
	tb.Helper()
	p := &Publisher{Dir: tb.TempDir(), lines: make(chan string, 64), stderr: &strings.Builder{}}
	script := testenv.Testdata("node", "pub.js")
	p.cmd = exec.Command(node, append([]string{script, mode, p.Dir}, args...)...)
	p.cmd.Env = append(os.Environ(), TracerEnv(tb)...)
	p.cmd.Env = append(p.cmd.Env, env...)
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	p.cmd.Stderr = lockedWriter{p}
	if err := p.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p.PID = p.cmd.Process.Pid
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	tb.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-done
		_ = p.cmd.Wait()
	})
	return p
}

type lockedWriter struct{ p *Publisher }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	if w.p.stderr.Len() < 64<<10 {
		w.p.stderr.Write(b)
	}
	return len(b), nil
}

// Stderr is what the publisher wrote on stderr so far (bounded).
func (p *Publisher) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// lineTimeout bounds the wait for the publisher's next line: Node and
// dd-trace start in a second, each step takes milliseconds.
const lineTimeout = 60 * time.Second

// Line is the publisher's next stdout line; the test fails if it exits or
// says nothing for lineTimeout.
func (p *Publisher) Line(tb testing.TB) string {
	tb.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			tb.Fatalf("node publisher exited; stderr:\n%s", p.Stderr())
		}
		return l
	case <-time.After(lineTimeout):
		tb.Fatalf("node publisher said nothing for %v; stderr:\n%s", lineTimeout, p.Stderr())
	}
	return ""
}

// Release creates the file a spinning step waits for.
func (p *Publisher) Release(tb testing.TB, name string) {
	tb.Helper()
	if err := os.WriteFile(filepath.Join(p.Dir, name), nil, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// Ready is a shapes step: the publisher spins in it until Release(Name).
type Ready struct {
	Name, Thread    string
	TraceID, SpanID string // "" when no span is active
}

// NextReady reads the next step ("ready NAME THREAD TRACE SPAN"); ok is
// false at "done".
func (p *Publisher) NextReady(tb testing.TB) (r Ready, ok bool) {
	tb.Helper()
	l := p.Line(tb)
	if l == "done" {
		return r, false
	}
	f := strings.Fields(l)
	if len(f) != 5 || f[0] != "ready" {
		tb.Fatalf("node publisher: unexpected line %q", l)
	}
	r = Ready{Name: f[1], Thread: f[2], TraceID: f[3], SpanID: f[4]}
	if r.TraceID == "-" {
		r.TraceID, r.SpanID = "", ""
	}
	return r, true
}

var _ io.Writer = lockedWriter{}

// Kill ends the publisher now (its exit is waited for at the test's end).
func (p *Publisher) Kill() { _ = p.cmd.Process.Kill() }

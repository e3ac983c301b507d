// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package tracersvc runs the services of the Python and Java tracer tests
// (testdata/python/svc.py, testdata/java/Svc.java): real services traced by
// the real dd-trace-py and Datadog Java agent, installed from PyPI and
// Maven Central by `make tracer-deps` into _build.
package tracersvc

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// Python is the virtualenv's python with ddtrace, or the test skips (fails
// under CI) when make tracer-deps has not installed it.
func Python(tb testing.TB) string {
	tb.Helper()
	p := filepath.Join(testenv.RepoRoot(), "_build", "python", "venv", "bin", "python")
	if _, err := os.Stat(filepath.Join(testenv.RepoRoot(), "_build", "python", "venv", "requirements.txt")); err != nil {
		testenv.Missing(tb, "ddtrace is not installed in _build/python (make tracer-deps)")
	}
	return p
}

// Agent is dd-java-agent.jar, or the test skips (fails under CI).
func Agent(tb testing.TB) string {
	tb.Helper()
	p := filepath.Join(testenv.RepoRoot(), "_build", "java", "dd-java-agent.jar")
	if _, err := os.Stat(p); err != nil {
		testenv.Missing(tb, "dd-java-agent is not installed in _build/java (make tracer-deps)")
	}
	return p
}

// JDK is the home of a JDK of at least release minMajor (with javac):
// JAVA_HOME, the java on PATH, or one of the distribution's JDKs
// (/usr/lib/jvm, where Debian and Temurin packages put them).
func JDK(tb testing.TB, minMajor int) string {
	tb.Helper()
	var homes []string
	if h := os.Getenv("JAVA_HOME"); h != "" {
		homes = append(homes, h)
	}
	if p, err := exec.LookPath("java"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			homes = append(homes, filepath.Dir(filepath.Dir(r)))
		}
	}
	more, _ := filepath.Glob("/usr/lib/jvm/*")
	homes = append(homes, more...)
	for _, h := range homes {
		if _, err := os.Stat(filepath.Join(h, "bin", "javac")); err != nil {
			continue
		}
		if major := releaseMajor(h); major >= minMajor {
			return h
		}
	}
	testenv.Missing(tb, fmt.Sprintf("no JDK %d or later (JAVA_HOME, PATH, /usr/lib/jvm)", minMajor))
	return ""
}

// releaseMajor reads JAVA_VERSION="17.0.15" from a JDK's release file.
func releaseMajor(home string) int {
	b, err := os.ReadFile(filepath.Join(home, "release"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "JAVA_VERSION="); ok {
			v = strings.Trim(v, `"`)
			major, _, _ := strings.Cut(v, ".")
			n, _ := strconv.Atoi(major)
			return n
		}
	}
	return 0
}

// CompileJava builds Svc.java with jdk against the agent (its API classes,
// datadog.trace.api.Trace and CorrelationIdentifier) into a temporary
// directory, returned.
func CompileJava(tb testing.TB, jdk, agent string) string {
	tb.Helper()
	dir := tb.TempDir()
	out, err := exec.Command(filepath.Join(jdk, "bin", "javac"), "-cp", agent, "-d", dir, testenv.Testdata("java", "Svc.java")).CombinedOutput()
	if err != nil {
		tb.Fatalf("javac: %v\n%s", err, out)
	}
	return dir
}

// NoAgentEnv is the environment of a traced service with no Datadog agent
// (spans are dropped, which changes nothing of the contexts) and nothing
// else that would go looking for one.
var NoAgentEnv = []string{
	"DD_TRACE_AGENT_URL=http://127.0.0.1:9",
	"DD_INSTRUMENTATION_TELEMETRY_ENABLED=false",
	"DD_REMOTE_CONFIGURATION_ENABLED=false",
	"DD_TRACE_STARTUP_LOGS=false",
}

// PythonCmd is svc.py on the virtualenv's python, with the thread context
// switched on explicitly and the service named service.
func PythonCmd(tb testing.TB, service string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(Python(tb), testenv.Testdata("python", "svc.py"))
	cmd.Env = append(append(os.Environ(), NoAgentEnv...), "DD_SERVICE="+service, "DD_TRACE_OTEL_CTX_ENABLED=true")
	return cmd
}

// PythonAsyncioCmd is aio.py, with the thread context switched on.
func PythonAsyncioCmd(tb testing.TB, service string) *exec.Cmd {
	tb.Helper()
	cmd := PythonCmd(tb, service)
	cmd.Args[1] = testenv.Testdata("python", "aio.py")
	return cmd
}

// PythonLateCmd is svc.py whose n request threads start before ddtrace is
// imported (its native module dlopen'ed).
func PythonLateCmd(tb testing.TB, service string, n int) *exec.Cmd {
	tb.Helper()
	cmd := PythonCmd(tb, service)
	cmd.Args = append(cmd.Args, "DIR", "late", strconv.Itoa(n))
	return cmd
}

// UntracedCmds are svc.py and Svc with neither tracer (they publish
// nothing), their environment extended by env.
func UntracedCmds(tb testing.TB, jdk string, env ...string) (python, java *exec.Cmd) {
	tb.Helper()
	python = exec.Command(Python(tb), testenv.Testdata("python", "svc.py"), "DIR", "untraced")
	python.Env = append(os.Environ(), env...)
	java = exec.Command(filepath.Join(jdk, "bin", "java"), "-cp", CompileJava(tb, jdk, Agent(tb)), "Svc", "DIR", "platform")
	java.Env = append(os.Environ(), env...)
	return python, java
}

// JavaCmd is Svc on jdk with the agent and its profiler (the publisher of
// both contexts), requests on platform or virtual threads (mode).
func JavaCmd(tb testing.TB, jdk, service, mode string) *exec.Cmd {
	tb.Helper()
	agent := Agent(tb)
	return javaCmd(tb, jdk, agent, service, "-javaagent:"+agent, "Svc", "DIR", mode)
}

// JavaLateCmd is Svc whose n request threads start before the agent is
// attached (and its profiler's library loaded), by the service itself.
func JavaLateCmd(tb testing.TB, jdk, service string, n int) *exec.Cmd {
	tb.Helper()
	agent := Agent(tb)
	return javaCmd(tb, jdk, agent, service, "-Djdk.attach.allowAttachSelf=true", "-Dsvc.agent="+agent,
		"Svc", "DIR", "late", strconv.Itoa(n))
}

func javaCmd(tb testing.TB, jdk, agent, service string, args ...string) *exec.Cmd {
	classes := CompileJava(tb, jdk, agent)
	cmd := exec.Command(filepath.Join(jdk, "bin", "java"), append([]string{
		"-Ddd.profiling.enabled=true",
		// Where the profiler extracts its library: a killed JVM leaves it.
		"-Ddd.profiling.tempdir=" + tb.TempDir(),
		// The ground truth's trace id in 128 bits (CorrelationIdentifier).
		"-Ddd.trace.128.bit.traceid.logging.enabled=true",
		// Carriers enough for the spinning virtual threads and the server's.
		"-Djdk.virtualThreadScheduler.parallelism=8",
		"-cp", classes}, args...)...)
	cmd.Env = append(append(os.Environ(), NoAgentEnv...), "DD_SERVICE="+service)
	return cmd
}

// Service is one running svc.py or Svc.
type Service struct {
	PID, Port int
	Dir       string // the step files
	// Pool: the TIDs of a late service's request threads ("pool" line).
	Pool map[int]bool

	cmd    *exec.Cmd
	lines  chan string
	stderr *bytes.Buffer
	mu     sync.Mutex
	client *http.Client
}

// Start runs cmd, whose argument "DIR" (svc.py's first, added when absent)
// becomes the step directory, and waits for "listening PORT PID" (after
// "pool TID..." for a late one). It is killed at the test's end.
func Start(tb testing.TB, cmd *exec.Cmd) *Service {
	tb.Helper()
	s := Launch(tb, cmd)
	s.WaitListening(tb)
	return s
}

func (s *Service) launch(tb testing.TB, cmd *exec.Cmd) {
	tb.Helper()
	replaced := false
	for i, a := range cmd.Args {
		if a == "DIR" {
			cmd.Args[i], replaced = s.Dir, true
		}
	}
	if !replaced {
		cmd.Args = append(cmd.Args, s.Dir)
	}
	s.cmd = cmd
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = lockedWriter{s}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	s.PID = cmd.Process.Pid
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(s.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
	})
}

// Launch is Start without the wait: the process runs, its PID is known;
// WaitListening then waits for it to serve.
func Launch(tb testing.TB, cmd *exec.Cmd) *Service {
	tb.Helper()
	s := &Service{Dir: tb.TempDir(), lines: make(chan string, 256), stderr: &bytes.Buffer{},
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	s.launch(tb, cmd)
	return s
}

// WaitListening reads the first lines: "pool TID..." (a late service), then
// "listening PORT PID".
func (s *Service) WaitListening(tb testing.TB) {
	tb.Helper()
	f := strings.Fields(s.Line(tb))
	if len(f) > 0 && f[0] == "pool" {
		s.Pool = map[int]bool{}
		for _, v := range f[1:] {
			tid, err := strconv.Atoi(v)
			if err != nil {
				tb.Fatalf("service: pool line %q", strings.Join(f, " "))
			}
			s.Pool[tid] = true
		}
		f = strings.Fields(s.Line(tb))
	}
	if len(f) != 3 || f[0] != "listening" {
		tb.Fatalf("service: line %q, want listening; stderr:\n%s", strings.Join(f, " "), s.Stderr())
	}
	s.Port, _ = strconv.Atoi(f[1])
}

type lockedWriter struct{ s *Service }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.s.stderr.Len() < 256<<10 {
		w.s.stderr.Write(b)
	}
	return len(b), nil
}

var _ io.Writer = lockedWriter{}

// Stderr is what the service wrote on stderr so far (bounded).
func (s *Service) Stderr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// Line is the service's next stdout line; the test fails if it exits or
// says nothing for long (a JVM with the agent took a minute to start on 2
// cores at a load average of 40).
func (s *Service) Line(tb testing.TB) string {
	tb.Helper()
	timeout := testenv.Scaled(5 * time.Minute)
	select {
	case l, ok := <-s.lines:
		if !ok {
			tb.Fatalf("service exited; stderr:\n%s", s.Stderr())
		}
		return l
	case <-time.After(timeout):
		tb.Fatalf("service said nothing for %v; stderr:\n%s", timeout, s.Stderr())
	}
	return ""
}

// Get requests path in the background; its answer's body is sent on the
// channel ("" when it failed: the service was killed at the test's end).
func (s *Service) Get(path string) <-chan string {
	c := make(chan string, 1)
	go func() {
		resp, err := s.client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", s.Port, path))
		if err != nil {
			c <- ""
			return
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		c <- string(b)
	}()
	return c
}

// Release creates the file step spins for.
func (s *Service) Release(tb testing.TB, step string) {
	tb.Helper()
	if err := os.WriteFile(filepath.Join(s.Dir, step), nil, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// Ready is a step the service spins in until Release: its ground truth from
// the tracer's API at that moment.
type Ready struct {
	Step                       string
	TID                        int
	TraceID, SpanID, LocalRoot string // "" for a thread with no active span
}

// NextReady reads the next "ready STEP TID TRACE SPAN LOCALROOT".
func (s *Service) NextReady(tb testing.TB) Ready {
	tb.Helper()
	l := s.Line(tb)
	f := strings.Fields(l)
	if len(f) != 6 || f[0] != "ready" {
		tb.Fatalf("service: unexpected line %q", l)
	}
	tid, err := strconv.Atoi(f[2])
	if err != nil {
		tb.Fatalf("service: %q", l)
	}
	r := Ready{Step: f[1], TID: tid, TraceID: f[3], SpanID: f[4], LocalRoot: f[5]}
	if r.TraceID == "-" {
		r.TraceID, r.SpanID, r.LocalRoot = "", "", ""
	}
	return r
}

// Kill ends the service now (its exit is waited for at the test's end).
func (s *Service) Kill() { _ = s.cmd.Process.Kill() }

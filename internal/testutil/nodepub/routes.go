// SPDX-License-Identifier: Apache-2.0

//go:build linux

package nodepub

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
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

// TracerEnv is the environment of a service traced by dd-trace with the
// thread context on and no agent (spans are dropped, which changes nothing
// of the contexts).
func TracerEnv(tb testing.TB) []string {
	return []string{
		"NODE_PATH=" + Modules(tb),
		"DD_TRACE_OTEL_CTX_ENABLED=true",
		"DD_TRACE_AGENT_URL=http://127.0.0.1:9",
		"DD_INSTRUMENTATION_TELEMETRY_ENABLED=false",
		"DD_REMOTE_CONFIGURATION_ENABLED=false",
		"DD_TRACE_STARTUP_LOGS=false",
	}
}

// Routes is one running routes.js: an HTTP service traced by dd-trace whose
// requests use a known amount of CPU time on its main thread.
type Routes struct {
	PID, Port int
	Truth     string // where /done writes the truth

	client *http.Client
	cmd    *exec.Cmd
}

// Kill ends the service now (its exit is waited for at the test's end).
func (r *Routes) Kill() { _ = r.cmd.Process.Kill() }

// StartRoutes runs routes.js with node; the process is killed at the
// test's end.
func StartRoutes(tb testing.TB, node string) *Routes {
	tb.Helper()
	r := &Routes{Truth: filepath.Join(tb.TempDir(), "truth"), client: &http.Client{Timeout: lineTimeout}}
	toBoot, toReal := clockOffsets()
	cmd := exec.Command(node, testenv.Testdata("node", "routes.js"), r.Truth)
	cmd.Env = append(append(os.Environ(), TracerEnv(tb)...),
		fmt.Sprintf("NODEPUB_BOOT_OFFSET=%d", toBoot), fmt.Sprintf("NODEPUB_REAL_OFFSET=%d", toReal))
	var stderr strings.Builder
	cmd.Stderr = &limitedWriter{w: &stderr, n: 64 << 10}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	r.cmd = cmd
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Scan()
		line <- sc.Text()
		_, _ = io.Copy(io.Discard, out)
	}()
	var l string
	select {
	case l = <-line:
	case <-time.After(lineTimeout):
		_ = cmd.Process.Kill()
		tb.Fatalf("routes.js said nothing for %v", lineTimeout)
	}
	f := strings.Fields(l)
	if len(f) != 3 || f[0] != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		tb.Fatalf("routes.js: %q; stderr:\n%s", l, stderr.String())
	}
	r.PID, _ = strconv.Atoi(f[1])
	r.Port, _ = strconv.Atoi(f[2])
	return r
}

// Get sends GET /route?ms=ms and waits for the answer.
func (r *Routes) Get(tb testing.TB, route string, busy time.Duration) {
	tb.Helper()
	r.get(tb, fmt.Sprintf("%s?ms=%d", route, busy.Milliseconds()))
}

func (r *Routes) get(tb testing.TB, pathQuery string) {
	tb.Helper()
	resp, err := r.client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", r.Port, pathQuery))
	if err != nil {
		tb.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("routes.js: GET %s: %s: %s", pathQuery, resp.Status, body)
	}
}

// Done makes the service write its truth and reads it.
func (r *Routes) Done(tb testing.TB) threadpub.SwitchTruth {
	tb.Helper()
	r.get(tb, "/done")
	tr, err := threadpub.ReadSwitchTruth(r.Truth)
	if err != nil {
		tb.Fatal(err)
	}
	return tr
}

type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if l.n > 0 {
		k := min(len(b), l.n)
		l.n -= k
		_, _ = l.w.Write(b[:k])
	}
	return len(b), nil
}

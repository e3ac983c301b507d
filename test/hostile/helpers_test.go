// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testfuse"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/watcher"
)

func TestMain(m *testing.M) { os.Exit(threadpub.Main(m)) }

// shutdownTimeout: Shutdown waits for the reader goroutines, so a reader
// stuck in a page fault would keep it waiting; this is a deadlock check,
// not a performance threshold.
const shutdownTimeout = 30 * time.Second

// eventually waits for cond (testenv.Eventually).
var eventually = testenv.Eventually

// fuseFile mounts the FUSE file the hostile publisher maps: 64 KiB, its
// mapping's size, so no page of the mapping is past the end.
func fuseFile(t *testing.T) *testfuse.FS {
	t.Helper()
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = 0xa5
	}
	return testfuse.Mount(t, b)
}

// hostileSource is testdata/hostile.c; it includes the process-context
// writer and the TLS variable of the thread publisher.
func hostileSource() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "hostile.c")
}

// buildHostile compiles the hostile publisher (cached by content).
func buildHostile(t testing.TB) string {
	t.Helper()
	cc := testenv.RequireTool(t, "gcc")
	dir := threadpub.SourceDir()
	tls := filepath.Join(dir, "otelctx_tls.c")
	// CompileC's cache key covers the main source and the flags: the
	// other inputs enter it as a digest in a define.
	h := sha256.New()
	for _, f := range []string{tls, filepath.Join(dir, "procctx.h")} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	return testpub.CompileC(t, cc, "hostile", hostileSource(), "-O2", "-Wall", "-pthread", "-rdynamic",
		"-I", dir, "-DHOSTILE_INPUTS="+hex.EncodeToString(h.Sum(nil))[:16], tls)
}

// publisher is a C test program speaking the line protocol of the test
// publishers ("ready PID", then one "ok ..." or "err ..." per command),
// started through sh: the test process traces its threads (thread_sampler:
// ptrace) and must not be its parent, or os/exec's wait would consume the
// ptrace stops, return, and close the publisher's stdin.
type publisher struct {
	t    testing.TB
	proc *testpub.Proc
	PID  int
}

func startDetached(t testing.TB, name, exe string, args ...string) *publisher {
	t.Helper()
	// sh keeps the pipe on fd 3 for the background job (whose stdin would
	// be /dev/null) and waits for it.
	script := `exec 3<&0; "$@" <&3 3<&- & wait $! 2>/dev/null`
	proc := testpub.RunProc(t, name, threadpub.ReplyTimeout, nil, "sh", append([]string{"-c", script, "sh", exe}, args...)...)
	p := &publisher{t: t, proc: proc}
	f := strings.Fields(proc.ReadLine())
	if len(f) != 2 || f[0] != "ready" {
		t.Fatalf("%s: greeting %q", name, f)
	}
	p.PID, _ = strconv.Atoi(f[1])
	t.Cleanup(func() { _ = syscall.Kill(p.PID, syscall.SIGKILL) })
	return p
}

// Do sends one command and returns the fields after "ok"; "err" fails the test.
func (p *publisher) Do(format string, args ...any) []string {
	p.t.Helper()
	cmd, l := p.proc.Ask(format, args...)
	f := strings.Fields(l)
	if len(f) == 0 || f[0] != "ok" {
		p.t.Fatalf("publisher %d: %s: %s", p.PID, cmd, l)
	}
	return f[1:]
}

// startWellBehaved runs a thread publisher (testdata/publishers) with one
// worker.
func startWellBehaved(t *testing.T) *publisher {
	t.Helper()
	exe, args := threadpub.Build(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	p := startDetached(t, "threadpub", exe, args...)
	p.Do("threads 1")
	return p
}

// hostile is a running hostile publisher (testdata/hostile.c).
type hostile struct{ *publisher }

func startHostile(t testing.TB) *hostile {
	t.Helper()
	return &hostile{startDetached(t, "hostile", buildHostile(t))}
}

// mapFile maps path in the publisher without touching it.
func (h *hostile) mapFile(path string) uint64 {
	h.t.Helper()
	return h.uint(h.Do("mapfile %s", path)[0])
}

// mapping returns the address of the published header.
func (h *hostile) mapping() uint64 {
	h.t.Helper()
	return h.uint(h.Do("context")[0])
}

// run starts the worker publishing a record with key index idx; its TID.
func (h *hostile) run(idx int) int {
	h.t.Helper()
	return int(h.uint(h.Do("run %d", idx)[0]))
}

func (h *hostile) uint(s string) uint64 {
	h.t.Helper()
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		h.t.Fatalf("hostile %d: %q: %v", h.PID, s, err)
	}
	return v
}

// startExtension creates and starts the process_ctx extension with cfg and
// the telemetry tel. The caller shuts it down (shutdownWithin).
func startExtension(t *testing.T, cfg *processctxextension.Config, tel *componenttest.Telemetry) (extension.Extension, *watcher.Watcher) {
	t.Helper()
	f := processctxextension.NewFactory()
	set := extensiontest.NewNopSettings(f.Type())
	set.TelemetrySettings = tel.NewTelemetrySettings()
	set.Logger = zaptest.NewLogger(t, zaptest.Level(zap.DebugLevel))
	ext, err := f.Create(context.Background(), set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	return ext, ext.(watcher.Provider).Watcher()
}

// shutdownWithin shuts ext down and fails the test unless Shutdown returns
// within shutdownTimeout; then it closes fs (a read held by the file system
// fails) and waits for Shutdown once more, so that the test always ends.
func shutdownWithin(t *testing.T, ext extension.Extension, fs *testfuse.FS) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- ext.Shutdown(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
		return
	case <-time.After(shutdownTimeout):
		t.Errorf("Shutdown has not returned after %v (%d READs of the FUSE file held): a reader is blocked", shutdownTimeout, fs.Pending())
	}
	fs.Close()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

// checkNoReads fails the test if the file system got a READ from one of
// the processes pids (the readers under test, and the publisher whose
// mapping it is: a fault in its context would be one a reader caused).
// Other processes' READs are logged only: a profiler on the host samples
// the busy publisher and reads its mappings with process_vm_readv.
func checkNoReads(t *testing.T, fs *testfuse.FS, what string, pids ...int) {
	t.Helper()
	if r := fs.ReadsBy(pids...); len(r) != 0 {
		t.Errorf("the FUSE file system got READs of %s from %v: %+v", what, pids, r)
	}
	for _, r := range fs.Reads() {
		if r.PID != 0 && !slices.Contains(pids, r.PID) {
			t.Logf("READ of %s by another process on the host, not counted: %+v", what, r)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package sampler

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// noTracefsEnv is set by `make test-no-tracefs`, which runs this package's
// tests again in a private mount namespace with tracefs unmounted, as on a
// fresh machine.
const noTracefsEnv = "OTELCTX_TEST_NO_TRACEFS"

// tracefsAtStart: whether tracefs was mounted when the test binary
// started, before any test could mount it.
var tracefsAtStart = func() bool {
	_, err := os.Stat("/sys/kernel/tracing/events")
	return err == nil
}()

// requireFreshTracefs fails a run of make test-no-tracefs that did not
// start without tracefs: it would prove nothing.
func requireFreshTracefs(t *testing.T) {
	t.Helper()
	if os.Getenv(noTracefsEnv) == "" {
		return
	}
	if tracefsAtStart {
		t.Fatalf("%s is set but tracefs was mounted when the test binary started", noTracefsEnv)
	}
	t.Logf("tracefs was not mounted when the test binary started (%s)", noTracefsEnv)
}

func TestTracepointID(t *testing.T) {
	defer func(d []string) { tracefsDirs = d }(tracefsDirs)
	dir := t.TempDir()
	second := filepath.Join(dir, "debug")
	tracefsDirs = []string{filepath.Join(dir, "none"), second}
	if _, err := tracepointID("syscalls", "sys_exit_prctl"); err == nil || !strings.Contains(err.Error(), "tracefs not mounted") {
		t.Errorf("no tracefs: %v", err)
	}
	ev := filepath.Join(second, "events", "syscalls", "sys_exit_prctl")
	if err := os.MkdirAll(ev, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ev, "id"), []byte("1234\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, err := tracepointID("syscalls", "sys_exit_prctl"); id != 1234 || err != nil {
		t.Errorf("id %d, %v", id, err)
	}
	if err := os.WriteFile(filepath.Join(ev, "id"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tracepointID("syscalls", "sys_exit_prctl"); err == nil {
		t.Errorf("a bad id parsed")
	}
}

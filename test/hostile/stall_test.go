// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// stallWorld is hostile publisher A and the extension with its default
// read_timeout and stall_timeout, watching A and the neighbours started
// later (by executable: their PIDs are not known yet).
type stallWorld struct {
	a   *hostile
	tel *componenttest.Telemetry
	cat *catalog.Catalog
	ext interface{ Shutdown(context.Context) error }
}

func startStallWorld(t *testing.T, a *hostile) *stallWorld {
	t.Helper()
	exe, _ := threadpub.Build(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	cfg := config(processctxextension.ThreadSamplerOff)
	cfg.Include.Executables = []string{filepath.Base(buildHostile(t)), filepath.Base(exe)}
	// Neighbours are found by discovery (thread_sampler off: no prctl
	// events), every 200 ms here.
	cfg.DiscoveryInterval, cfg.RecheckInterval = 200*time.Millisecond, 200*time.Millisecond
	w := &stallWorld{a: a, tel: componenttest.NewTelemetry()}
	t.Cleanup(func() { _ = w.tel.Shutdown(context.Background()) })
	ext, wt := startExtension(t, cfg, w.tel)
	w.ext, w.cat = ext, wt.Catalog()
	t.Cleanup(func() { _ = ext.Shutdown(context.Background()) })
	eventually(t, "A in the catalog", func() bool { _, ok := w.cat.Process(a.PID); return ok })
	return w
}

// neighbourDelay starts a well-behaved publisher B and returns how long
// it took to be announced (in the catalog), and B.
func (w *stallWorld) neighbourDelay(t *testing.T) (time.Duration, *publisher) {
	t.Helper()
	start := time.Now()
	b := startWellBehaved(t)
	eventually(t, "B, started after A's hostile page, announced", func() bool { _, ok := w.cat.Process(b.PID); return ok })
	return time.Since(start), b
}

// shutdown shuts the extension down, fails the test if it does not
// return (deadlock check, not a threshold), and returns how long it took.
func (w *stallWorld) shutdown(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- w.ext.Shutdown(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(shutdownTimeout):
		t.Fatalf("Shutdown has not returned after %v: a reader is blocked", shutdownTimeout)
	}
	return time.Since(start)
}

// TestDevZeroOverFUSE: publisher A, in its own mount namespace, binds a
// FUSE file whose server never answers over /dev/zero, maps /dev/zero
// without touching it, and moves its payload there (a new stamp). The
// name is the kernel's name of anonymous memory, the device is not
// /dev/zero's: the poll refuses the read (file_backed) without faulting
// the page in. A neighbour started afterwards is announced, Shutdown
// returns, and the file system never saw a READ.
func TestDevZeroOverFUSE(t *testing.T) {
	testenv.RequireRoot(t)
	unshare := testenv.RequireTool(t, "unshare")
	fs := fuseFile(t)
	a := &hostile{startDetached(t, "hostile", unshare, "--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$0" /dev/zero && exec "$1"`, fs.Path(), buildHostile(t))}
	addr := a.mapFile("/dev/zero")
	if maps, err := os.ReadFile("/proc/" + strconv.Itoa(a.PID) + "/maps"); err != nil || !strings.Contains(string(maps), " /dev/zero\n") {
		t.Fatalf("A's maps name no /dev/zero mapping (%v):\n%s", err, maps)
	}
	w := startStallWorld(t, a)
	before := telemetrytest.Sum(w.tel, "otelcol_processctx_reads_failed", "reason", "file_backed")
	a.Do("move %#x", addr)
	eventually(t, "A's payload on FUSE-over-/dev/zero refused as file_backed", func() bool {
		return telemetrytest.Sum(w.tel, "otelcol_processctx_reads_failed", "reason", "file_backed") > before
	})
	delay, b := w.neighbourDelay(t)
	took := w.shutdown(t)
	t.Logf("neighbour announced %v after its start; Shutdown took %v", delay, took)
	checkNoReads(t, fs, "/dev/zero on FUSE", os.Getpid(), a.PID, b.PID)
}

// TestUserfaultfdPayload: publisher A moves its payload (a new stamp)
// into anonymous memory registered with a userfaultfd it never answers.
// Page checks cannot tell: the poll's read waits, until the read timeout
// abandons it and quarantines A (read_timeouts, reads_failed{stalled}).
// A neighbour started afterwards is announced, Shutdown returns, and
// A's blocked read returns when A exits.
func TestUserfaultfdPayload(t *testing.T) {
	testenv.RequireRoot(t) // vm.unprivileged_userfaultfd=0: A runs as root
	a := startHostile(t)
	_, reply := a.proc.Ask("uffd")
	f := strings.Fields(reply)
	if len(f) < 2 || f[0] != "ok" {
		testenv.Missing(t, "the kernel refuses userfaultfd to the publisher: "+reply)
	}
	addr := a.uint(f[1])
	w := startStallWorld(t, a)
	before := remote.Stalls()
	a.Do("move %#x", addr)
	eventually(t, "A's read abandoned after read_timeout and A quarantined", func() bool {
		st := remote.Stalls()
		return st.Timeouts > before.Timeouts && st.Quarantined > 0
	})
	eventually(t, "the timeout counted", func() bool {
		return telemetrytest.Sum(w.tel, "otelcol_processctx_read_timeouts", "", "") > 0 &&
			telemetrytest.Sum(w.tel, "otelcol_processctx_reads_failed", "reason", "stalled") > 0
	})
	delay, _ := w.neighbourDelay(t)
	took := w.shutdown(t)
	t.Logf("neighbour announced %v after its start; Shutdown took %v (read_timeout %v)", delay, took, remote.ReadTimeout())
	if st := remote.Stalls(); st.Hung == 0 {
		t.Errorf("no read of A blocked: %+v (the test did not reach the page)", st)
	}
	if err := syscall.Kill(a.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "A's blocked read returned once A exited", func() bool { return remote.Stalls().Hung == before.Hung })
}

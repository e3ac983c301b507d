// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package hostile runs the process_ctx extension against a publisher that
// points it at memory whose read would block: a page of a FUSE file that
// was mapped but never touched, whose READ the file system (internal/
// testfuse) holds. Every read at an address a publisher chose goes through
// safemem, which refuses such a page without faulting it in; these tests
// show that sampling of the other processes, and Shutdown, carry on.
package hostile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testfuse"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/watcher"
)

// unknownKey is the key index of the hostile record: the published key
// map has one key (index 0), so a reader refreshes the map to name it.
const unknownKey = 3

// config is the extension's default configuration with short intervals,
// watching only the test's publishers (the host's other processes are
// other tests' business).
func config(sampler string, pids ...int) *processctxextension.Config {
	cfg := processctxextension.NewFactory().CreateDefaultConfig().(*processctxextension.Config)
	cfg.CollectionInterval = 50 * time.Millisecond
	cfg.Include.PIDs = pids
	cfg.ThreadSampler = sampler
	cfg.ThreadContext.Interval = 100 * time.Millisecond // ptrace; the lowest allowed
	return cfg
}

// world is one test's FUSE file, hostile publisher A with the file mapped
// at fileAddr, well-behaved publisher B, and the extension watching both.
type world struct {
	fs       *testfuse.FS
	a        *hostile
	b        *publisher
	fileAddr uint64
	tel      *componenttest.Telemetry
	ext      extension.Extension
	cat      *catalog.Catalog
}

// start sets up the world with thread_sampler: sampler, and waits for the
// extension to know both publishers. Shutdown, if the test does not reach
// its own, is checked when it ends.
func start(t *testing.T, sampler string) *world {
	t.Helper()
	w := &world{fs: fuseFile(t), a: startHostile(t), b: startWellBehaved(t)}
	w.fileAddr = w.a.mapFile(w.fs.Path())
	w.tel = componenttest.NewTelemetry()
	t.Cleanup(func() { _ = w.tel.Shutdown(context.Background()) })
	var wt *watcher.Watcher
	w.ext, wt = startExtension(t, config(sampler, w.a.PID, w.b.PID), w.tel)
	t.Cleanup(func() { shutdownWithin(t, w.ext, w.fs) }) // a second Shutdown returns at once
	w.cat = wt.Catalog()
	eventually(t, "both publishers in the catalog", func() bool {
		_, okA := w.cat.Process(w.a.PID)
		_, okB := w.cat.Process(w.b.PID)
		return okA && okB
	})
	return w
}

// end shuts the extension down (c) and checks that the file system never
// got a READ (d) from the extension (this process) or from A.
func (w *world) end(t *testing.T) {
	t.Helper()
	shutdownWithin(t, w.ext, w.fs)
	checkNoReads(t, w.fs, "A's page", os.Getpid(), w.a.PID)
}

// TestHostileKeyMap: publisher A tracks its threads with a key map whose
// payload pointer it then moves, without a new stamp, into a page of a
// FUSE file nobody touched; its worker's record uses a key index the map
// lacks, so the reader re-reads the key map there. The re-read must be
// refused (safemem) rather than wait for the file system: the record of A
// still lands in the catalog, records of publisher B keep arriving after
// it, Shutdown returns, and the file system never saw a READ.
func TestHostileKeyMap(t *testing.T) {
	for _, tc := range []struct{ name, sampler string }{
		{"ebpf", processctxextension.ThreadSamplerEBPF},
		{"ptrace", processctxextension.ThreadSamplerPtrace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.RequireRoot(t)
			if tc.sampler == processctxextension.ThreadSamplerEBPF {
				samplertest.Require(t)
			}
			testHostileKeyMap(t, tc.sampler)
		})
	}
}

func testHostileKeyMap(t *testing.T, sampler string) {
	w := start(t, sampler)
	a, b, cat := w.a, w.b, w.cat
	mapping := a.mapping()

	// The stamp is unchanged: the poll does not re-read A's context, only
	// the key-map refresh does.
	a.Do("redirect %#x", w.fileAddr)
	if _, _, err := processctx.Read(safemem.New("", a.PID), mapping, processctx.DefaultLimits()); !errors.Is(err, safemem.ErrFileBacked) {
		t.Fatalf("A's context through safemem: %v, want ErrFileBacked", err)
	}
	tidA := a.run(unknownKey)
	var seenA time.Time
	eventually(t, "A's record in the catalog (its key-map refresh has returned)", func() bool {
		rec, at, ok := cat.Thread(a.PID, tidA)
		if ok && rec.Record.SpanID.String() == "0badc0de00000001" {
			seenA = at
			return true
		}
		return false
	})
	if rec, _, _ := cat.Thread(a.PID, tidA); len(rec.Attributes) != 0 || len(rec.Record.Attrs) != 1 || rec.Record.Attrs[0].KeyIndex != unknownKey {
		t.Errorf("A's record: attributes %v, raw %v: want the key index %d unnamed", rec.Attributes, rec.Record.Attrs, unknownKey)
	}
	if n := telemetrytest.Sum(w.tel, "otelcol_processctx_key_map_refreshes", "result", "failed"); n < 1 {
		t.Errorf("key_map_refreshes{result=failed} = %d, want the refused refresh counted", n)
	}

	// B's spans, all started after A's refresh: some must be read.
	tidB, _ := strconv.Atoi(b.Do("switch 0 1000 20 %s", filepath.Join(t.TempDir(), "truth"))[0])
	eventually(t, "a record of B read after A's refresh", func() bool {
		for _, o := range cat.History(b.PID, tidB) {
			if o.Record != nil && o.First.After(seenA) && strings.HasPrefix(o.Record.Record.TraceID.String(), "5157") {
				return true
			}
		}
		return false
	})
	w.end(t)
}

// TestPayloadMovedIntoFUSE: publisher A updates its context (a new stamp)
// with the payload pointer in a page of a FUSE file nobody touched. The
// poll's full read is refused and counted as file_backed, B's update is
// still read, Shutdown returns, and the file system never saw a READ.
func TestPayloadMovedIntoFUSE(t *testing.T) {
	testenv.RequireRoot(t)
	w := start(t, processctxextension.ThreadSamplerOff)
	a, b, cat, tel := w.a, w.b, w.cat, w.tel

	before := telemetrytest.Sum(tel, "otelcol_processctx_reads_failed", "reason", "file_backed")
	a.Do("move %#x", w.fileAddr)
	eventually(t, "A's moved payload counted as a file_backed read failure", func() bool {
		return telemetrytest.Sum(tel, "otelcol_processctx_reads_failed", "reason", "file_backed") > before
	})
	keys := append(append([]string(nil), threadpub.KeyMap...), "hostile.after")
	b.Do("keymap %s", strings.Join(keys, ","))
	eventually(t, "B's update read after A's refused one", func() bool {
		p, ok := cat.Process(b.PID)
		return ok && len(p.Context.ThreadLocal.AttributeKeyMap) == len(keys)
	})
	w.end(t)
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// TestHeaderOvermappedWithFUSE: publisher A, tracked, maps a page of a FUSE
// file nobody touched over its own header. The poll's stamp read of A must
// be refused (counted as file_backed) rather than wait for the file
// system: the one poll goroutine goes on, so B's update is still read,
// Shutdown returns, and the file system never saw a READ.
func TestHeaderOvermappedWithFUSE(t *testing.T) {
	testenv.RequireRoot(t)
	w := start(t, processctxextension.ThreadSamplerOff)
	a, b, cat, tel := w.a, w.b, w.cat, w.tel

	before := telemetrytest.Sum(tel, "otelcol_processctx_reads_failed", "reason", "file_backed")
	a.Do("overmap %s", w.fs.Path())
	eventually(t, "A's header read refused as file_backed", func() bool {
		return telemetrytest.Sum(tel, "otelcol_processctx_reads_failed", "reason", "file_backed") > before
	})
	eventually(t, "A lost (its context is gone)", func() bool {
		_, ok := cat.Process(a.PID)
		return !ok
	})
	keys := append(append([]string(nil), threadpub.KeyMap...), "hostile.after")
	b.Do("keymap %s", strings.Join(keys, ","))
	eventually(t, "B's update read after A's header was overmapped", func() bool {
		p, ok := cat.Process(b.PID)
		return ok && len(p.Context.ThreadLocal.AttributeKeyMap) == len(keys)
	})
	w.end(t)
}

// collectorStopBound is the goal for a collector whose publisher
// hangs its reads: stopped within 5 s of SIGTERM (it stops in well under a
// second; a blocked reader kept it running for ever).
const collectorStopBound = 5 * time.Second

// TestCollectorWithHeaderOvermapped: the built distribution tracks A and
// B; A maps a never-answering FUSE file over its header. B's update still
// reaches the exporter, and the collector stops on SIGTERM.
func TestCollectorWithHeaderOvermapped(t *testing.T) {
	testenv.RequireRoot(t)
	fs := fuseFile(t)
	a := startHostile(t)
	b := testpub.Start(t, testpub.Glibc)
	b.Set("service.name", "well-behaved")
	b.Publish()
	col := startCollector(t, processctxextension.ThreadSamplerOff, a.PID, b.PID)
	// Before the collector's cleanup: a READ the file system holds cannot be
	// interrupted, not even by SIGKILL, until the connection is aborted.
	t.Cleanup(fs.Close)
	eventually(t, "both publishers announced", func() bool {
		return col.announced(t, a.PID, "hostile") && col.announced(t, b.PID, "well-behaved")
	})

	a.Do("overmap %s", fs.Path())
	b.Set("service.name", "well-behaved-after")
	b.Publish()
	eventually(t, "B's update announced after A's header was overmapped", func() bool {
		return col.announced(t, b.PID, "well-behaved-after")
	})
	col.stopWithin(t, collectorStopBound)
	checkNoReads(t, fs, "A's header", col.Cmd.Process.Pid, a.PID)
}

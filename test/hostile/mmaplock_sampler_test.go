// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/extension/processctxextension"
	"github.com/otelctx/otelctx/internal/proc/lockread"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestSamplerNeighbourHoldsMmapLock is issue 46's item 3: publisher A
// holds its own mmap lock (lockMmap: every read of its pagemap, map_files
// or memory waits) while the sampler has a read of A to make on its own
// goroutine: with eBPF, A's record (read by the kernel, which needs no
// lock) switches to a key index A's key map lacks, so the sampler's Run
// goroutine re-reads A's key map; with ptrace, the snapshot reads A's
// record itself. The test waits until that read was abandoned (the
// counter says so), then starts a thread in publisher B: B's first record
// lands in the catalog while A still holds its lock, and Shutdown
// returns. (A publisher started afterwards being announced is
// TestCollectorNeighbourHoldsMmapLock's.)
func TestSamplerNeighbourHoldsMmapLock(t *testing.T) {
	for _, tc := range []struct{ name, sampler string }{
		{"ebpf", processctxextension.ThreadSamplerEBPF},
		{"ptrace", processctxextension.ThreadSamplerPtrace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.RequireRoot(t)
			if tc.sampler == processctxextension.ThreadSamplerEBPF {
				samplertest.Require(t)
			}
			testSamplerNeighbourHoldsMmapLock(t, tc.sampler)
		})
	}
}

func stallsSoFar() uint64 { return remote.Stalls().Timeouts + lockread.Stalls().Timeouts }

func testSamplerNeighbourHoldsMmapLock(t *testing.T, sampler string) {
	w := start(t, sampler)
	a, b, cat := w.a, w.b, w.cat
	// A's worker first: creating a thread maps its stack, which would
	// queue behind the held lock. Its key is known: the one refresh an
	// unknown key offers is kept for while A holds its lock.
	tidA := a.run(0)
	eventually(t, "A's record in the catalog", func() bool {
		_, _, ok := cat.Thread(a.PID, tidA)
		return ok
	})

	before, failedBefore := stallsSoFar(), samplerReadsFailed(w)
	lockMmap(t, a, w.fs, w.fileAddr)
	locked := time.Now()
	// Memory writes only (no mmap, which would queue behind the lock).
	a.Do("setidx %d", unknownKey)
	eventually(t, "the sampler's read of A abandoned after read_timeout", func() bool {
		return stallsSoFar() > before && samplerReadsFailed(w) > failedBefore
	})
	abandoned := time.Since(locked)

	// B's worker, its first records, all started after the sampler's read
	// of A was abandoned, while A still holds its lock.
	start := time.Now()
	tidB, _ := strconv.Atoi(b.Do("switch 0 1000 20 %s", filepath.Join(t.TempDir(), "truth"))[0])
	eventually(t, "the first record of B's new thread, while A holds its mmap lock", func() bool {
		for _, o := range cat.History(b.PID, tidB) {
			if o.Record != nil && o.First.After(start) && strings.HasPrefix(o.Record.Record.TraceID.String(), "5157") {
				return true
			}
		}
		return false
	})
	firstB := time.Since(start)

	stop := time.Now()
	shutdownWithin(t, w.ext, w.fs)
	t.Logf("the sampler's read of A abandoned %v after A's lock (%d read timeouts, %d sampler reads failed); B's first record %v after its thread started; Shutdown %v",
		abandoned, stallsSoFar()-before, samplerReadsFailed(w)-failedBefore, firstB, time.Since(stop))
}

// samplerReadsFailed counts the sampler's reads of A that failed: with
// eBPF the key-map refresh, with ptrace the snapshot's record reads.
func samplerReadsFailed(w *world) int64 {
	n := telemetrytest.Sum(w.tel, "otelcol_processctx_key_map_refreshes", "result", "failed")
	for _, reason := range []string{"read error", "timeout", "snapshot error"} {
		n += telemetrytest.Sum(w.tel, "otelcol_processctx_thread_read_failures", "reason", reason)
	}
	return n
}

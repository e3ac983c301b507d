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
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestSamplerNeighbourHoldsMmapLock is issue 46's item 3: publisher A,
// whose worker's record uses a key index its key map lacks (so the
// thread reader refreshes A's key map, and the eBPF sync reads A's maps),
// then holds its own mmap lock (lockMmap: every read of its maps, pagemap
// or memory waits). The reads of A time out and A is quarantined; the
// first record of a thread publisher B starts afterwards lands in the
// catalog (the sampler's Run goroutine and the eBPF sync are not held up
// by A), and Shutdown returns. (A publisher started afterwards being
// announced is TestCollectorNeighbourHoldsMmapLock's.)
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
	// queue behind the held lock.
	tidA := a.run(unknownKey)
	eventually(t, "A's record in the catalog", func() bool {
		_, _, ok := cat.Thread(a.PID, tidA)
		return ok
	})

	before := stallsSoFar()
	lockMmap(t, a, w.fs, w.fileAddr)
	locked := time.Now()
	eventually(t, "a read of A abandoned after read_timeout", func() bool { return stallsSoFar() > before })
	abandoned := time.Since(locked)

	// B's worker, its first records, all started after A's lock.
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
	t.Logf("A's read abandoned %v after its lock (%d timeouts); B's first record %v after its thread started; Shutdown %v",
		abandoned, stallsSoFar()-before, firstB, time.Since(stop))
}

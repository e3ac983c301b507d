// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"bytes"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/distrun"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testfuse"
)

// lockMmap has publisher A hold its own mmap lock the way the issue's
// recipe does: a thread reads A's own FUSE-backed mapping through
// /proc/self/mem (the READ, served by this test, is held), then a second
// thread's mmap queues as a writer; every later reader of A's mmap lock
// (its maps, its pagemap, process_vm_readv) queues behind it until fs
// answers or is aborted (its cleanup).
func lockMmap(t *testing.T, a *hostile, fs *testfuse.FS, addr uint64) {
	t.Helper()
	tid := a.uint(a.Do("selfread %#x", addr)[1])
	eventually(t, "A's own read of its FUSE page held by the file system", func() bool { return len(fs.ReadsBy(a.PID)) > 0 })
	a.Do("mmapwait")
	eventually(t, "A's mmap queued on its mmap lock (state D)", func() bool { return taskState(a.PID, int(tid)) == 'D' })
}

// taskState is a thread's state letter (/proc/PID/task/TID/stat), 0 if
// unreadable.
func taskState(pid, tid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')') // the name (field 2) may hold anything
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// TestCollectorNeighbourHoldsMmapLock: the distribution (discovery, the
// defaults but for the intervals) tracks publisher A, which then holds its
// own mmap lock (lockMmap). The poll's pagemap read of A times out after
// read_timeout and A is quarantined (logged); a publisher B started
// afterwards is announced, health_check stays healthy (no stage of the
// agent itself stalls), and SIGTERM ends the collector.
func TestCollectorNeighbourHoldsMmapLock(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.DistBinary(t)
	fs := fuseFile(t)
	a := startHostile(t)
	addr := a.mapFile(fs.Path())
	health := freeAddr(t)
	dir := t.TempDir()
	c := &collector{distrun.StartConfig(t, bin, dir, distrun.Config{
		CollectionInterval: 100 * time.Millisecond, DiscoveryInterval: 200 * time.Millisecond, ThreadSampler: "off",
		Entities: dir + "/events.jsonl", Health: health,
	}), dir + "/events.jsonl"}
	eventually(t, "health_check answers 200", func() bool { return healthStatus(health) == http.StatusOK })
	eventually(t, "A announced", func() bool { return c.announced(t, a.PID, "hostile") })

	lockMmap(t, a, fs, addr)
	locked := time.Now()
	eventually(t, "a read of A abandoned after read_timeout (logged)", func() bool {
		return strings.Contains(c.Log(), "did not return")
	})
	abandoned := time.Since(locked)

	start := time.Now()
	b := startHostile(t) // well-behaved: it never locks anything
	eventually(t, "B, started after A locked its mmap lock, announced", func() bool { return c.announced(t, b.PID, "hostile") })
	delay := time.Since(start)
	if s := healthStatus(health); s != http.StatusOK {
		t.Errorf("health_check answers %d while only A is stuck, not the agent:\n%s", s, c.Log())
	}

	stop := time.Now()
	c.stopWithin(t, shutdownTimeout)
	t.Logf("A's read abandoned %v after the lock; B announced %v after its start; exit %v after SIGTERM",
		abandoned, delay, time.Since(stop))
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package hostile

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/testutil/distrun"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// collector is the built distribution running on a configuration of
// process_ctx receiver -> file exporter.
type collector struct {
	*distrun.Collector
	out string // the exporter's file (OTLP JSON logs, one batch a line)
}

// startCollector runs the distribution (OTELCTX_DIST_BIN) watching pids
// with thread_sampler (off, or auto for the eBPF prctl events).
func startCollector(t testing.TB, sampler string, pids ...int) *collector {
	t.Helper()
	bin := testenv.DistBinary(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "events.jsonl")
	return &collector{distrun.StartConfig(t, bin, dir, distrun.Config{
		PIDs: pids, CollectionInterval: 100 * time.Millisecond, ThreadSampler: sampler,
		EntityInterval: time.Minute, Entities: out,
	}), out}
}

// announced reports whether an entity event of pid with service.name
// svc was written.
func (c *collector) announced(t testing.TB, pid int, svc string) bool {
	t.Helper()
	data, err := os.ReadFile(c.out)
	if err != nil {
		return false
	}
	for _, line := range bytes.Split(data, []byte{'\n'}) {
		if announcedIn(line, pid, svc) {
			return true
		}
	}
	return false
}

// announcedIn reports whether line, a batch of entity events in OTLP JSON,
// holds one of pid with service.name svc.
func announcedIn(line []byte, pid int, svc string) bool {
	var um plog.JSONUnmarshaler
	logs, err := um.UnmarshalLogs(line)
	if err != nil {
		return false // empty, or a line being written
	}
	for _, rl := range logs.ResourceLogs().All() {
		res := rl.Resource().Attributes()
		p, okP := res.Get("process.pid")
		s, okS := res.Get("service.name")
		if okP && okS && p.Int() == int64(pid) && s.AsString() == svc {
			return true
		}
	}
	return false
}

// cpuTicks is the collector's user and system time so far, in clock ticks.
func (c *collector) cpuTicks(t testing.TB) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(c.Cmd.Process.Pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	st, err := procstat.Parse(b)
	if err != nil {
		t.Fatalf("collector stat: %v", err)
	}
	return st.UTime + st.STime
}

// stopWithin sends SIGTERM and fails unless the collector exits, with
// status 0, within d.
func (c *collector) stopWithin(t testing.TB, d time.Duration) {
	t.Helper()
	if err := c.Stop(d); err != nil {
		t.Error(err)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
)

// A process that publishes process.pid, process.creation.time and another
// executable's process.executable.* never gets them onto the data, even
// under published_wins: process.*: the data's observed values stay, and
// absent ones are not filled from the published context.
func TestPublishedObservedKeysIgnored(t *testing.T) {
	c := testCatalog(t)
	addProcess(c, 100, t0, "spoof", strAttr("service.name", "spoof"), strAttr("process.pid", "1"),
		strAttr("process.executable.name", "victim"), strAttr("process.executable.path", "/usr/bin/victim"),
		strAttr("process.creation.time", "2000-01-01T00:00:00Z"))
	for _, wins := range [][]string{nil, {"process.", "service."}} {
		cfg := testPolicy()
		cfg.PublishedWins = wins
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		_ = rl.Resource().Attributes().FromRaw(map[string]any{"process.pid": int64(100), "process.executable.name": "spoof"})
		rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().SetTimestamp(pcommonTime(t0.Add(time.Second)))
		Logs(c, cfg, ld)
		res := ld.ResourceLogs().At(0).Resource().Attributes().AsRaw()
		want := map[string]any{"process.pid": int64(100), "process.executable.name": "spoof", "service.name": "spoof"}
		if len(res) != len(want) {
			t.Errorf("published_wins %v: resource %v, want %v", wins, res, want)
		}
		for k, v := range want {
			if res[k] != v {
				t.Errorf("published_wins %v: %s = %v, want %v", wins, k, res[k], v)
			}
		}
	}
}

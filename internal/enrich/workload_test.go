// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/publisher"
)

const (
	testCID = "3f4e1b2c9d8a7f6e5d4c3b2a19081726354a5b6c7d8e9f0a1b2c3d4e5f607182"
	testUID = "8a1c3e2f-4b5d-4c6e-9f70-a1b2c3d4e5f6"
)

// The process's container.id and k8s.pod.uid, as the extension read them
// from its cgroup path, reach the resource under the merge policy in place
// of the published values; a published value stands where none was read.
func TestWorkloadMerge(t *testing.T) {
	c := testCatalog(t)
	inPod := &publisher.Process{ID: publisher.ProcessID{PID: 100, StartTicks: 1}, CreationTime: t0,
		Workload: hostinfo.Workload{ContainerID: testCID, PodUID: testUID}}
	inPod.Context.Resource.Attributes = append(inPod.Context.Resource.Attributes, strAttr("container.id", "spoof"), strAttr("service.name", "checkout"))
	onHost := &publisher.Process{ID: publisher.ProcessID{PID: 200, StartTicks: 1}, CreationTime: t0}
	onHost.Context.Resource.Attributes = append(onHost.Context.Resource.Attributes, strAttr("container.id", "published"))
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: inPod}, {Kind: publisher.Found, Process: onHost}})

	for _, tc := range []struct {
		name      string
		pid       int64
		wins      []string
		insert    bool
		has, want map[string]any
	}{
		{"lacking: observed values added", 100, nil, true, nil,
			map[string]any{"container.id": testCID, "k8s.pod.uid": testUID}},
		{"the profiler's container.id kept", 100, nil, true, map[string]any{"container.id": "profiler"},
			map[string]any{"container.id": "profiler", "k8s.pod.uid": testUID}},
		{"other_keys ignore: nothing added", 100, nil, false, nil,
			map[string]any{"container.id": nil, "k8s.pod.uid": nil}},
		{"published_wins container.: the observed value replaces", 100, []string{"container."}, true, map[string]any{"container.id": "profiler"},
			map[string]any{"container.id": testCID, "k8s.pod.uid": testUID}},
		{"nothing observed: the published value by the policy", 200, nil, true, nil,
			map[string]any{"container.id": "published", "k8s.pod.uid": nil}},
	} {
		cfg := testPolicy()
		cfg.PublishedWins, cfg.InsertOtherKeys = tc.wins, tc.insert
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		_ = rl.Resource().Attributes().FromRaw(tc.has)
		rl.Resource().Attributes().PutInt("process.pid", tc.pid)
		rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().SetTimestamp(pcommonTime(t0.Add(time.Second)))
		Logs(c, cfg, ld)
		res := ld.ResourceLogs().At(0).Resource().Attributes().AsRaw()
		for k, v := range tc.want {
			if res[k] != v {
				t.Errorf("%s: %s = %v, want %v (resource %v)", tc.name, k, res[k], v, res)
			}
		}
	}
}

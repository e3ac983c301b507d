// SPDX-License-Identifier: Apache-2.0

//go:build linux

package entityevents

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelctx/otelctx/internal/hostinfo"
)

const (
	testCID = "3f4e1b2c9d8a7f6e5d4c3b2a19081726354a5b6c7d8e9f0a1b2c3d4e5f607182"
	testUID = "8a1c3e2f-4b5d-4c6e-9f70-a1b2c3d4e5f6"
)

// testSite is a site on host h-1 (node-7); testProcess runs in a
// containerd pod container there.
func testSite(t *testing.T) *site {
	t.Helper()
	return newSite(hostinfo.Host{ID: "h-1", Name: "node-7.example"}, "node-7")
}

type specEvent struct {
	name     string
	res, rec map[string]any
}

func specEvents(l plog.Logs) (out []specEvent) {
	for _, rl := range l.ResourceLogs().All() {
		for _, sl := range rl.ScopeLogs().All() {
			if _, ok := sl.Scope().Attributes().Get(attrEventAsLog); ok {
				continue // legacy
			}
			for _, lr := range sl.LogRecords().All() {
				out = append(out, specEvent{lr.EventName(), rl.Resource().Attributes().AsRaw(), lr.Attributes().AsRaw()})
			}
		}
	}
	return out
}

// The specification's form: event names, string ids, description, the
// interval in seconds, relationships (process runs_on host,
// service.instance runs_on process); every event's resource says where the
// process runs, and a published host.name does not replace the host's.
func TestSpecForm(t *testing.T) {
	p := testProcess("service.name", "checkout", "service.instance.id", "i-1", "service.version", "1.2", "host.name", "checkout-pod")
	cl := newClaims()
	b := newEventBuilder(time.Minute, time.Now(), cl)
	b.site, b.spec = testSite(t), true
	b.Found(p)
	evs := specEvents(b.logs)
	if len(evs) != 2 || evs[0].name != "entity.state" || evs[1].name != "entity.state" {
		t.Fatalf("events %+v", evs)
	}
	res := evs[0].res
	for k, v := range map[string]any{"host.id": "h-1", "host.name": "node-7.example", "k8s.node.name": "node-7",
		"container.id": testCID, "k8s.pod.uid": testUID, "process.pid": int64(4242)} {
		if res[k] != v {
			t.Errorf("resource %s = %v, want %v", k, res[k], v)
		}
	}
	proc, svc := evs[0].rec, evs[1].rec
	procID := map[string]any{"process.pid": "4242", "process.creation.time": "2026-11-21T09:00:00Z", "host.id": "h-1"}
	if proc["entity.type"] != "process" || !equalMaps(proc["entity.id"], procID) || proc["entity.report.interval"] != int64(60) {
		t.Errorf("process event %v", proc)
	}
	if d := proc["entity.description"].(map[string]any); d["container.id"] != testCID || d["k8s.pod.uid"] != testUID || d["process.executable.path"] != "/usr/bin/app" {
		t.Errorf("process description %v", d)
	}
	wantRel := func(rec map[string]any, typ string, id map[string]any) {
		t.Helper()
		rels, _ := rec["entity.relationships"].([]any)
		if len(rels) != 1 {
			t.Fatalf("relationships %v", rec["entity.relationships"])
		}
		r := rels[0].(map[string]any)
		if r["relationship.type"] != "runs_on" || r["entity.type"] != typ || !equalMaps(r["entity.id"], id) {
			t.Errorf("relationship %v, want runs_on %s %v", r, typ, id)
		}
	}
	wantRel(proc, "host", map[string]any{"host.id": "h-1"})
	wantRel(svc, "process", procID)
	if d := svc["entity.description"].(map[string]any); d["service.version"] != "1.2" {
		t.Errorf("service.instance description %v", d)
	}

	b = newEventBuilder(time.Minute, time.Now(), cl)
	b.site, b.spec = testSite(t), true
	b.Lost(p)
	for _, e := range specEvents(b.logs) {
		if e.name != "entity.delete" || e.rec["entity.delete.reason"] != "terminated" || e.rec["entity.description"] != nil || e.rec["entity.relationships"] != nil {
			t.Errorf("delete %+v", e)
		}
	}
}

func equalMaps(got any, want map[string]any) bool {
	m, ok := got.(map[string]any)
	if !ok || len(m) != len(want) {
		return false
	}
	for k, v := range want {
		if m[k] != v {
			return false
		}
	}
	return true
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package entityevents

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/publisher"
)

func testProcess(attrs ...string) *publisher.Process {
	p := &publisher.Process{
		ID:             publisher.ProcessID{PID: 4242, StartTicks: 99},
		CreationTime:   time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC),
		ExecutableName: "app",
		ExecutablePath: "/usr/bin/app",
		Workload:       hostinfo.Workload{ContainerID: testCID, PodUID: testUID},
	}
	for i := 0; i+1 < len(attrs); i += 2 {
		p.Context.Resource.Attributes = append(p.Context.Resource.Attributes, processctx.Attribute{Key: attrs[i], Value: str(attrs[i+1])})
	}
	return p
}

// records flattens logs into (resource, record) pairs for assertions.
func records(l plog.Logs) (out []struct {
	res map[string]any
	rec map[string]any
}) {
	for i := 0; i < l.ResourceLogs().Len(); i++ {
		rl := l.ResourceLogs().At(i)
		for j := 0; j < rl.ScopeLogs().Len(); j++ {
			sl := rl.ScopeLogs().At(j)
			for k := 0; k < sl.LogRecords().Len(); k++ {
				out = append(out, struct {
					res map[string]any
					rec map[string]any
				}{rl.Resource().Attributes().AsRaw(), sl.LogRecords().At(k).Attributes().AsRaw()})
			}
		}
	}
	return out
}

func TestFoundAnnouncesProcessAndServiceInstance(t *testing.T) {
	p := testProcess("service.name", "checkout", "service.instance.id", "i-1", "service.version", "1.2", "process.pid", "7")
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	b := newEventBuilder(5*time.Minute, now, newClaims())
	b.Found(p)

	rl := b.logs.ResourceLogs().At(0)
	if v, _ := rl.ScopeLogs().At(0).Scope().Attributes().Get(attrEventAsLog); !v.Bool() {
		t.Fatal("scope lacks otel.entity.event_as_log=true")
	}
	recs := records(b.logs)
	if len(recs) != 2 {
		t.Fatalf("want 2 events, got %d", len(recs))
	}
	res := recs[0].res
	// The observed PID wins over a published one (namespaces differ).
	if res["process.pid"] != int64(4242) || res["process.creation.time"] != "2026-11-21T09:00:00Z" ||
		res["service.name"] != "checkout" || res["process.executable.name"] != "app" {
		t.Fatalf("resource: %v", res)
	}
	proc, svc := recs[0].rec, recs[1].rec
	if proc[attrEventType] != "entity_state" || proc[attrEntityType] != "process" || proc[attrEntityInterval] != int64(300000) {
		t.Fatalf("process event: %v", proc)
	}
	if id := proc[attrEntityID].(map[string]any); id["process.pid"] != int64(4242) || id["process.creation.time"] != "2026-11-21T09:00:00Z" {
		t.Fatalf("process id: %v", id)
	}
	if svc[attrEntityType] != "service.instance" {
		t.Fatalf("service event: %v", svc)
	}
	if id := svc[attrEntityID].(map[string]any); len(id) != 2 || id["service.name"] != "checkout" || id["service.instance.id"] != "i-1" {
		t.Fatalf("service id: %v", id)
	}
	if a := svc[attrEntityAttributes].(map[string]any); a["service.version"] != "1.2" {
		t.Fatalf("service attributes: %v", a)
	}
	if lr := b.logs.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0); lr.Timestamp().AsTime() != now {
		t.Fatalf("timestamp %v, want observation time %v", lr.Timestamp().AsTime(), now)
	}
}

func TestNoServiceNameMeansProcessOnly(t *testing.T) {
	b := newEventBuilder(time.Minute, time.Now(), newClaims())
	b.Found(testProcess("host.name", "h"))
	if recs := records(b.logs); len(recs) != 1 || recs[0].rec[attrEntityType] != "process" {
		t.Fatalf("got %v", recs)
	}
}

func TestEntityRefsDecideEntities(t *testing.T) {
	p := testProcess("service.name", "checkout", "k8s.pod.uid", "uid-1", "k8s.pod.name", "checkout-abc")
	p.Context.Resource.EntityRefs = []processctx.EntityRef{
		{Type: "k8s.pod", IDKeys: []string{"k8s.pod.uid"}, DescriptionKeys: []string{"k8s.pod.name", "absent"}},
		{Type: "broken", IDKeys: []string{"absent"}}, // no identity: skipped
	}
	b := newEventBuilder(time.Minute, time.Now(), newClaims())
	b.Found(p)
	recs := records(b.logs)
	if len(recs) != 1 {
		t.Fatalf("want only the k8s.pod entity, got %v", recs)
	}
	r := recs[0].rec
	if r[attrEntityType] != "k8s.pod" || r[attrEntityID].(map[string]any)["k8s.pod.uid"] != "uid-1" ||
		r[attrEntityAttributes].(map[string]any)["k8s.pod.name"] != "checkout-abc" {
		t.Fatalf("got %v", r)
	}
}

func TestUpdatedDeletesReplacedEntities(t *testing.T) {
	prev := testProcess("service.name", "checkout", "service.instance.id", "old")
	cur := testProcess("service.name", "checkout", "service.instance.id", "new")
	cl := newClaims()
	newEventBuilder(time.Minute, time.Now(), cl).Found(prev)
	b := newEventBuilder(time.Minute, time.Now(), cl)
	b.Updated(prev, cur)
	recs := records(b.logs)
	// delete old service.instance (under the old resource), then state for
	// process and the new service.instance.
	if len(recs) != 3 {
		t.Fatalf("got %d events: %v", len(recs), recs)
	}
	del := recs[0]
	if del.rec[attrEventType] != "entity_delete" || del.rec[attrEntityID].(map[string]any)["service.instance.id"] != "old" || del.res["service.instance.id"] != "old" {
		t.Fatalf("delete: %v", del)
	}
	if _, has := del.rec[attrEntityInterval]; has {
		t.Fatal("delete events carry no interval")
	}
	if recs[2].rec[attrEventType] != "entity_state" || recs[2].rec[attrEntityID].(map[string]any)["service.instance.id"] != "new" {
		t.Fatalf("state: %v", recs[2])
	}
	if b.counts["entity_delete"] != 1 || b.counts["entity_state"] != 2 {
		t.Fatalf("counts %v", b.counts)
	}
}

func TestLostDeletesAll(t *testing.T) {
	cl := newClaims()
	p := testProcess("service.name", "checkout")
	newEventBuilder(time.Minute, time.Now(), cl).Found(p)
	b := newEventBuilder(time.Minute, time.Now(), cl)
	b.Lost(p)
	recs := records(b.logs)
	if len(recs) != 2 || recs[0].rec[attrEventType] != "entity_delete" || recs[1].rec[attrEventType] != "entity_delete" {
		t.Fatalf("got %v", recs)
	}
}

func TestNonStringIdentifyingValues(t *testing.T) {
	p := testProcess()
	p.Context.Resource.Attributes = []processctx.Attribute{{Key: "shard", Value: processctx.Value{Kind: processctx.KindInt, Int: 3}}}
	p.Context.Resource.EntityRefs = []processctx.EntityRef{{Type: "shard", IDKeys: []string{"shard"}}}
	q := testProcess()
	q.Context.Resource.Attributes = []processctx.Attribute{{Key: "shard", Value: processctx.Value{Kind: processctx.KindInt, Int: 4}}}
	q.Context.Resource.EntityRefs = p.Context.Resource.EntityRefs
	if ents(p)[0].key() == ents(q)[0].key() {
		t.Fatal("different int identities must give different keys")
	}
}

// An entity another live process still announces is not deleted when one
// of its announcers goes: publishing a victim's service.instance.id and
// exiting does not delete the victim's entity. It is deleted with its
// last announcer.
func TestDeleteOnlyUnclaimedEntities(t *testing.T) {
	victim := testProcess("service.name", "checkout", "service.instance.id", "i-1")
	spoof := testProcess("service.name", "checkout", "service.instance.id", "i-1")
	spoof.ID.PID, spoof.ExecutablePath = 666, "/tmp/spoof"
	cl := newClaims()
	b := newEventBuilder(time.Minute, time.Now(), cl)
	b.Found(victim)
	b.Found(spoof)
	deletes := func(b *Builder) (types []string) {
		for _, r := range records(b.logs) {
			if r.rec[attrEventType] == EventTypeDelete {
				types = append(types, r.rec[attrEntityType].(string))
			}
		}
		return types
	}
	b = newEventBuilder(time.Minute, time.Now(), cl)
	b.Lost(spoof)
	if d := deletes(b); len(d) != 1 || d[0] != entityTypeProcess {
		t.Fatalf("the spoofer's exit deleted %v, want only its process", d)
	}
	// An update away from the shared id does not delete it either.
	moved := testProcess("service.name", "checkout", "service.instance.id", "i-2")
	newEventBuilder(time.Minute, time.Now(), cl).Found(spoof)
	b = newEventBuilder(time.Minute, time.Now(), cl)
	b.Updated(spoof, func() *publisher.Process { m := *moved; m.ID = spoof.ID; return &m }())
	if d := deletes(b); len(d) != 0 {
		t.Fatalf("the spoofer's update deleted %v", d)
	}
	b = newEventBuilder(time.Minute, time.Now(), cl)
	b.Lost(victim)
	if d := deletes(b); len(d) != 2 {
		t.Fatalf("the last announcer's exit deleted %v, want its process and service.instance", d)
	}
	if len(cl.holders) != 2 || len(cl.of) != 1 { // the spoofer's process and i-2
		t.Errorf("claims left: %v", cl.holders)
	}
}

// Published process.pid, process.creation.time and process.executable.*
// never replace the observed ones, in the resource and in the entities.
func TestObservedAttributesWin(t *testing.T) {
	p := testProcess("service.name", "checkout", "process.executable.name", "victim",
		"process.executable.path", "/usr/bin/victim", "process.pid", "1", "process.creation.time", "2000-01-01T00:00:00Z")
	b := newEventBuilder(time.Minute, time.Now(), newClaims())
	b.Found(p)
	for _, r := range records(b.logs) {
		if r.res["process.executable.name"] != "app" || r.res["process.executable.path"] != "/usr/bin/app" ||
			r.res["process.pid"] != int64(4242) || r.res["process.creation.time"] != "2026-11-21T09:00:00Z" {
			t.Fatalf("resource: %v", r.res)
		}
		if r.rec[attrEntityType] == entityTypeProcess {
			if a := r.rec[attrEntityAttributes].(map[string]any); a["process.executable.name"] != "app" || a["process.executable.path"] != "/usr/bin/app" {
				t.Fatalf("process entity attributes: %v", a)
			}
		}
	}
	// Without an observed executable, a published one is not used either.
	p.ExecutableName, p.ExecutablePath = "", ""
	if attrs := resourceAttributes(p, nil); len(attrs) != 3 {
		t.Errorf("attributes %v, want service.name, process.pid, process.creation.time", attrs)
	}
}

// ents is the entities of p without a site.
func ents(p *publisher.Process) []entity { return entitiesOf(p, resourceAttributes(p, nil)) }

// A service.name that spells another entity's identity (a NUL, then
// "service.instance.id=1") does not share its key: the victim's entity is
// deleted when the victim exits, while the spoofer still runs.
func TestSpelledIdentityKeepsOwnKey(t *testing.T) {
	victim := testProcess("service.name", "pay")
	victim.Context.Resource.Attributes = append(victim.Context.Resource.Attributes,
		processctx.Attribute{Key: "service.instance.id", Value: processctx.Value{Kind: processctx.KindInt, Int: 1}})
	spoof := testProcess("service.name", "pay\x00service.instance.id=1")
	spoof.ID.PID, spoof.ExecutablePath = 666, "/tmp/spoof"
	strOne := testProcess("service.name", "pay", "service.instance.id", "1")
	for _, other := range []*publisher.Process{spoof, strOne} {
		if ents(victim)[1].key() == ents(other)[1].key() {
			t.Errorf("%v and %v share a key", ents(victim)[1].id, ents(other)[1].id)
		}
	}
	cl := newClaims()
	b := newEventBuilder(time.Minute, time.Now(), cl)
	b.Found(victim)
	b.Found(spoof)
	b = newEventBuilder(time.Minute, time.Now(), cl)
	b.Lost(victim)
	var deleted []string
	for _, r := range records(b.logs) {
		if r.rec[attrEventType] == EventTypeDelete {
			deleted = append(deleted, r.rec[attrEntityType].(string))
		}
	}
	if len(deleted) != 2 {
		t.Fatalf("the victim's exit deleted %v, want its process and service.instance", deleted)
	}
}

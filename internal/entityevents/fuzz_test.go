// SPDX-License-Identifier: Apache-2.0

//go:build linux

package entityevents

import (
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/fuzzcorpus"
)

// FuzzEntityEvents builds the entity events of two processes from
// published payloads (decoded as the extension decodes them): a process
// found with prev, updated to cur, stated again and lost, next to another
// process that publishes cur throughout. Whatever the payloads: every event
// is well formed, the observed attributes are the observed ones, an entity
// the other process announces is never deleted, and the claims end empty.
func FuzzEntityEvents(f *testing.F) {
	f.Fuzz(func(t *testing.T, prev, cur []byte) {
		a, b := fuzzProcess(t, 10, prev), fuzzProcess(t, 20, cur)
		if a == nil || b == nil {
			return
		}
		aCur := *b
		aCur.ID, aCur.ExecutablePath, aCur.ExecutableName = a.ID, a.ExecutablePath, a.ExecutableName
		cl := newClaims()
		run := func(fn func(*Builder)) []struct{ res, rec map[string]any } {
			bld := newEventBuilder(time.Minute, time.Unix(1000, 0), cl)
			fn(bld)
			checkValidUTF8(t, bld.logs)
			out := records(bld.logs)
			var n int64
			for _, c := range bld.counts {
				n += c
			}
			if n != int64(len(out)) {
				t.Fatalf("counted %d events, built %d", n, len(out))
			}
			for _, r := range out {
				checkFuzzEvent(t, r.res, r.rec)
			}
			return out
		}
		run(func(bld *Builder) { bld.Found(b) })
		run(func(bld *Builder) { bld.Found(a) })
		run(func(bld *Builder) { bld.Updated(a, &aCur) })
		run(func(bld *Builder) { bld.Found(&aCur) })
		// aCur's entities that b does not announce, and only those, are deleted.
		others := map[string]bool{}
		for _, e := range entitiesOf(b, resourceAttributes(b, nil)) {
			others[e.key()] = true
		}
		orphans := map[string]bool{}
		for _, e := range entitiesOf(&aCur, resourceAttributes(&aCur, nil)) {
			if !others[e.key()] {
				orphans[e.key()] = true
			}
		}
		deletes := 0
		for _, r := range run(func(bld *Builder) { bld.Lost(&aCur) }) {
			if r.rec[attrEventType] != EventTypeDelete {
				t.Fatalf("a loss stated %v", r.rec)
			}
			deletes++
		}
		if deletes != countDistinct(entitiesOf(&aCur, resourceAttributes(&aCur, nil)), orphans) {
			t.Fatalf("%d deletes, want one per entity no other process announces (%d)", deletes, len(orphans))
		}
		run(func(bld *Builder) { bld.Lost(b) })
		if len(cl.holders) != 0 || len(cl.of) != 0 {
			t.Fatalf("claims left after every process was lost: %v", cl.holders)
		}
		checkFuzzSpec(t, a, &aCur)
	})
}

// checkFuzzSpec builds a's events in the specification's form, on a site:
// event names, string ids, the site's identity on every resource.
func checkFuzzSpec(t *testing.T, a, aCur *publisher.Process) {
	bld := newEventBuilder(time.Minute, time.Unix(1000, 0), newClaims())
	bld.site = newSite(hostinfo.Host{ID: "fuzz-host", Name: "fuzz"}, "")
	bld.spec = true
	bld.Found(a)
	bld.Updated(a, aCur)
	bld.Lost(aCur)
	checkValidUTF8(t, bld.logs)
	for _, e := range specEvents(bld.logs) {
		if e.res["host.id"] != "fuzz-host" || (e.name != "entity.state" && e.name != "entity.delete") {
			t.Fatalf("spec event %q, resource %v", e.name, e.res)
		}
		id, _ := e.rec["entity.id"].(map[string]any)
		if len(id) == 0 {
			t.Fatalf("spec event without id: %v", e.rec)
		}
		for k, v := range id {
			if _, ok := v.(string); !ok {
				t.Fatalf("entity.id %s = %v (%T): not a string", k, v, v)
			}
		}
	}
}

// fuzzProcess is a process publishing payload; nil when it does not decode.
func fuzzProcess(t *testing.T, pid int, payload []byte) *publisher.Process {
	c, _, err := processctx.Decode(payload, processctx.DefaultLimits())
	if err != nil {
		return nil
	}
	return &publisher.Process{
		ID:           publisher.ProcessID{PID: pid, StartTicks: uint64(pid)},
		CreationTime: time.Unix(int64(pid), 0), ExecutablePath: "/usr/bin/observed", ExecutableName: "observed",
		MappingAddr: 0x1000, Context: c,
	}
}

func checkFuzzEvent(t *testing.T, res, rec map[string]any) {
	t.Helper()
	if res["process.executable.path"] != "/usr/bin/observed" || res["process.executable.name"] != "observed" {
		t.Fatalf("resource executable not the observed one: %v", res)
	}
	if pid, ok := res["process.pid"].(int64); !ok || (pid != 10 && pid != 20) {
		t.Fatalf("resource process.pid %v", res["process.pid"])
	}
	switch rec[attrEventType] {
	case EventTypeState:
		if _, ok := rec[attrEntityAttributes].(map[string]any); !ok || rec[attrEntityInterval] != int64(60000) {
			t.Fatalf("state event %v", rec)
		}
	case EventTypeDelete:
	default:
		t.Fatalf("event type %v", rec[attrEventType])
	}
	if typ, _ := rec[attrEntityType].(string); typ == "" {
		t.Fatalf("entity without type: %v", rec)
	}
	if id, _ := rec[attrEntityID].(map[string]any); len(id) == 0 {
		t.Fatalf("entity without id: %v", rec)
	}
}

// countDistinct counts the entities of ents whose key is in keys, as
// events name them (an entity listed twice is one claim, but two events).
func countDistinct(ents []entity, keys map[string]bool) int {
	n := 0
	for _, e := range ents {
		if keys[e.key()] {
			n++
		}
	}
	return n
}

// The seed corpus under testdata/fuzz is generated here; TestSeedCorpus
// keeps it in sync (go test -run TestSeedCorpus -update-corpus rewrites it).
func seedCorpus() fuzzcorpus.Seeds {
	svc := func(inst string) []*commonpb.KeyValue {
		return []*commonpb.KeyValue{kvs("service.name", "checkout"), kvs("service.instance.id", inst), kvs("service.version", "1.2")}
	}
	pod := &commonpb.EntityRef{Type: "k8s.pod", IdKeys: []string{"k8s.pod.uid"}, DescriptionKeys: []string{"k8s.pod.name"}}
	proc := &commonpb.EntityRef{Type: "process", IdKeys: []string{"process.pid", "process.creation.time"}, DescriptionKeys: []string{"process.executable.path"}}
	podAttrs := append(svc("i-1"), kvs("k8s.pod.uid", "uid-1"), kvs("k8s.pod.name", "checkout-abc"))
	spoofed := append(svc("i-1"), kvs("process.pid", "1"), kvs("process.executable.path", "/usr/bin/victim"),
		kvs("process.executable.name", "victim"), kvs("process.creation.time", "2000-01-01T00:00:00Z"))
	ints := []*commonpb.KeyValue{{Key: "shard", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 3}}}}
	shard := &commonpb.EntityRef{Type: "shard", IdKeys: []string{"shard", "absent"}}
	return fuzzcorpus.Seeds{"FuzzEntityEvents": {
		"instance-changes":   {payload(svc("i-1"), nil), payload(svc("i-2"), nil)},
		"same-instance":      {payload(svc("i-1"), nil), payload(svc("i-1"), nil)},
		"entity-refs":        {payload(podAttrs, []*commonpb.EntityRef{pod, proc}), payload(podAttrs, []*commonpb.EntityRef{pod})},
		"duplicate-refs":     {payload(podAttrs, []*commonpb.EntityRef{pod, pod, {Type: "", IdKeys: []string{"k8s.pod.uid"}}}), payload(podAttrs, nil)},
		"published-observed": {payload(spoofed, []*commonpb.EntityRef{proc}), payload(spoofed, nil)},
		"int-identity":       {payload(ints, []*commonpb.EntityRef{shard}), payload(ints, []*commonpb.EntityRef{shard})},
		"no-service":         {payload(nil, nil), payload([]*commonpb.KeyValue{kvs("host.name", "h")}, nil)},
		"garbage":            {[]byte{0x0a, 0x7f, 0x0a}, []byte{}},
	}}
}

func kvs(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

// payload encodes a process context whose resource has attrs and refs.
func payload(attrs []*commonpb.KeyValue, refs []*commonpb.EntityRef) []byte {
	res, err := proto.Marshal(&resourcepb.Resource{Attributes: attrs, EntityRefs: refs})
	if err != nil {
		panic(err)
	}
	return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), res)
}

func TestSeedCorpus(t *testing.T) {
	fuzzcorpus.Check(t, "./receiver/processctxreceiver", seedCorpus())
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package entityevents

import (
	"encoding/binary"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/pdataconv"
	"github.com/otelctx/otelctx/internal/publisher"
)

// Entity-event conventions of collector-contrib (docs/entity-events.md).
const (
	attrEventAsLog        = "otel.entity.event_as_log"
	attrEventType         = "otel.entity.event.type"
	attrEntityType        = "otel.entity.type"
	attrEntityID          = "otel.entity.id"
	attrEntityAttributes  = "otel.entity.attributes"
	attrEntityInterval    = "otel.entity.interval"
	entityTypeProcess     = "process"
	entityTypeServiceInst = "service.instance"

	// Resource attributes the receiver sets from what it observed itself.
	attrProcessPID          = catalog.KeyPID
	attrProcessCreationTime = catalog.KeyCreationTime
	attrExecutableName      = catalog.KeyExecutableName
	attrExecutablePath      = catalog.KeyExecutablePath
)

// entity is one entity announced for a process.
type entity struct {
	typ   string
	id    []processctx.Attribute
	attrs []processctx.Attribute
	// rels are its relationships (spec form only).
	rels []relationship
}

// relationship: the entity (source) relates by typ to the target entity.
type relationship struct {
	typ, targetType string
	targetID        []processctx.Attribute
}

// key identifies an entity across events: type plus identifying keys and
// values, each length-prefixed and each value with its kind, so no string a
// process publishes (a NUL, a "k=v" inside it, "1" for 1) spells another
// entity's key.
func (e entity) key() string {
	b := appendPart(nil, e.typ)
	for _, a := range e.id {
		b = appendPart(b, a.Key)
		b = append(b, byte(a.Value.Kind))
		b = appendPart(b, valueKey(a.Value))
	}
	return string(b)
}

func appendPart(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func valueKey(v processctx.Value) string {
	switch v.Kind {
	case processctx.KindStr:
		return v.Str
	default:
		// Identifying values are scalars in practice; render the rest
		// through pdata's canonical string form.
		pv := pcommon.NewValueEmpty()
		pdataconv.PutValue(pv, v)
		return pv.AsString()
	}
}

// resourceAttributes are the published resource attributes plus what the
// receiver observed: the process's identity (catalog.Observed) and where it
// runs (site: host.id, host.name, k8s.node.name, container.id,
// k8s.pod.uid, as known). Observed values are always the receiver's: an SDK
// in a container publishes its namespace's PID and its container's
// hostname, and a process may claim another's executable.
func resourceAttributes(p *publisher.Process, where []processctx.Attribute) []processctx.Attribute {
	res := p.Context.Resource.Attributes
	out := make([]processctx.Attribute, 0, len(res)+4+len(where))
	for _, a := range res {
		if _, placed := processctx.Lookup(where, a.Key); !placed && !catalog.Observed(a.Key) {
			out = append(out, a)
		}
	}
	out = append(out,
		processctx.Attribute{Key: attrProcessPID, Value: processctx.Value{Kind: processctx.KindInt, Int: int64(p.ID.PID)}},
		processctx.Attribute{Key: attrProcessCreationTime, Value: str(p.CreationTime.UTC().Format(time.RFC3339Nano))},
	)
	if p.ExecutableName != "" {
		out = append(out, processctx.Attribute{Key: attrExecutableName, Value: str(p.ExecutableName)})
	}
	if p.ExecutablePath != "" {
		out = append(out, processctx.Attribute{Key: attrExecutablePath, Value: str(p.ExecutablePath)})
	}
	return append(out, where...)
}

func str(s string) processctx.Value { return processctx.Value{Kind: processctx.KindStr, Str: s} }

// entitiesOf lists the entities a process announces, given its resource
// attributes: the ones its Resource names in entity_refs when it has any,
// else a process entity (unique across hosts with host.id) and, when
// service.name is published, a service.instance entity that runs on it.
func entitiesOf(p *publisher.Process, attrs []processctx.Attribute) []entity {
	if refs := p.Context.Resource.EntityRefs; len(refs) > 0 {
		out := make([]entity, 0, len(refs))
		for _, r := range refs {
			e := entity{typ: r.Type, id: pick(attrs, r.IDKeys), attrs: pick(attrs, r.DescriptionKeys)}
			if r.Type == "" || len(e.id) == 0 {
				continue // an entity without type or identity cannot be tracked
			}
			out = append(out, e)
		}
		return out
	}
	proc := entity{
		typ:   entityTypeProcess,
		id:    pick(attrs, []string{attrProcessPID, attrProcessCreationTime, attrHostID}),
		attrs: pick(attrs, []string{attrExecutableName, attrExecutablePath, attrContainerID, attrPodUID}),
	}
	if host := pick(attrs, []string{attrHostID}); len(host) > 0 {
		proc.rels = []relationship{{typ: relRunsOn, targetType: entityTypeHost, targetID: host}}
	}
	out := []entity{proc}
	if _, ok := processctx.Lookup(attrs, "service.name"); ok {
		out = append(out, entity{
			typ:   entityTypeServiceInst,
			id:    pick(attrs, []string{"service.name", "service.namespace", "service.instance.id"}),
			attrs: pick(attrs, []string{"service.version"}),
			rels:  []relationship{{typ: relRunsOn, targetType: entityTypeProcess, targetID: proc.id}},
		})
	}
	return out
}

// pick returns the attributes named by keys, in keys' order; absent keys are
// skipped.
func pick(attrs []processctx.Attribute, keys []string) []processctx.Attribute {
	out := make([]processctx.Attribute, 0, len(keys))
	for _, k := range keys {
		if v, ok := processctx.Lookup(attrs, k); ok {
			out = append(out, processctx.Attribute{Key: k, Value: v})
		}
	}
	return out
}

// Builder accumulates entity events into one plog.Logs: one
// ResourceLogs per process, one LogRecord per event.
type Builder struct {
	logs     plog.Logs
	interval time.Duration
	now      pcommon.Timestamp
	counts   map[string]int64
	claims   *claims
	// site says where processes run (nil: not said); spec: the
	// specification's form of the events, else the legacy one.
	site *site
	spec bool
	// scope names the events' instrumentation scope (the receiver's).
	scope string
}

func newEventBuilder(interval time.Duration, now time.Time, cl *claims) *Builder {
	return &Builder{logs: plog.NewLogs(), interval: interval, now: pcommon.NewTimestampFromTime(now), counts: map[string]int64{}, claims: cl}
}

// resource is p's resource attributes.
func (b *Builder) resource(p *publisher.Process) []processctx.Attribute {
	return resourceAttributes(p, b.site.of(p))
}

// add appends one ResourceLogs for p (attrs: its resource) with a state
// event for each of states and a delete event, for reason, for each of
// deletes.
func (b *Builder) add(p *publisher.Process, attrs []processctx.Attribute, states, deletes []entity, reason string) {
	if len(states) == 0 && len(deletes) == 0 {
		return
	}
	rl := b.logs.ResourceLogs().AppendEmpty()
	pdataconv.PutAttributes(rl.Resource().Attributes(), attrs)
	rl.Resource().SetDroppedAttributesCount(p.Context.Resource.DroppedAttributesCount)
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName(b.scope)
	if !b.spec {
		sl.Scope().Attributes().PutBool(attrEventAsLog, true)
	}
	for _, e := range deletes {
		b.record(sl, e, EventTypeDelete, reason)
	}
	for _, e := range states {
		b.record(sl, e, EventTypeState, "")
	}
}

func (b *Builder) record(sl plog.ScopeLogs, e entity, eventType, reason string) {
	lr := sl.LogRecords().AppendEmpty()
	lr.SetTimestamp(b.now)
	lr.SetObservedTimestamp(b.now)
	b.counts[eventType]++
	if b.spec {
		b.specRecord(lr, e, eventType, reason)
		return
	}
	a := lr.Attributes()
	a.PutStr(attrEventType, eventType)
	a.PutStr(attrEntityType, pdataconv.Str(e.typ))
	pdataconv.PutAttributes(a.PutEmptyMap(attrEntityID), e.id)
	if eventType == EventTypeState {
		pdataconv.PutAttributes(a.PutEmptyMap(attrEntityAttributes), e.attrs)
		a.PutInt(attrEntityInterval, b.interval.Milliseconds())
	}
}

// Found announces every entity of a new process.
func (b *Builder) Found(p *publisher.Process) {
	attrs := b.resource(p)
	ents := entitiesOf(p, attrs)
	b.claims.announce(p.ID, ents)
	b.add(p, attrs, ents, nil, "")
}

// Lost deletes the entities of a process that went away that no other
// process announces.
func (b *Builder) Lost(p *publisher.Process) {
	attrs := b.resource(p)
	b.add(p, attrs, nil, only(entitiesOf(p, attrs), b.claims.withdraw(p.ID)), deleteTerminated)
}

// Updated deletes the entities that no process announces any more (under
// the previous resource) and announces the current ones.
func (b *Builder) Updated(prev, cur *publisher.Process) {
	attrs, prevAttrs := b.resource(cur), b.resource(prev)
	now := entitiesOf(cur, attrs)
	orphaned := b.claims.announce(cur.ID, now)
	b.add(prev, prevAttrs, nil, only(entitiesOf(prev, prevAttrs), orphaned), deleteReplaced)
	b.add(cur, attrs, now, nil, "")
}

// only keeps the entities whose key is in keys.
func only(ents []entity, keys map[string]bool) []entity {
	out := ents[:0]
	for _, e := range ents {
		if keys[e.key()] {
			out = append(out, e)
		}
	}
	return out
}

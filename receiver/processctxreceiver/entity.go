package processctxreceiver

import (
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/pdataconv"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/processctx"
	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

// Entity-event conventions of collector-contrib (docs/entity-events.md).
const (
	attrEventAsLog        = "otel.entity.event_as_log"
	attrEventType         = "otel.entity.event.type"
	attrEntityType        = "otel.entity.type"
	attrEntityID          = "otel.entity.id"
	attrEntityAttributes  = "otel.entity.attributes"
	attrEntityInterval    = "otel.entity.interval"
	eventTypeState        = "entity_state"
	eventTypeDelete       = "entity_delete"
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
}

// key identifies an entity across events: type plus identifying values.
func (e entity) key() string {
	var b strings.Builder
	b.WriteString(e.typ)
	for _, a := range e.id {
		b.WriteByte(0)
		b.WriteString(a.Key)
		b.WriteByte('=')
		b.WriteString(valueKey(a.Value))
	}
	return b.String()
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
// receiver observed. The observed keys (catalog.Observed) are always the
// receiver's: an SDK in a container publishes its namespace's PID, and a
// process may claim another's executable.
func resourceAttributes(p *scan.Process) []processctx.Attribute {
	res := p.Context.Resource.Attributes
	out := make([]processctx.Attribute, 0, len(res)+4)
	for _, a := range res {
		if !catalog.Observed(a.Key) {
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
	return out
}

func str(s string) processctx.Value { return processctx.Value{Kind: processctx.KindStr, Str: s} }

// entitiesOf lists the entities a process announces: the ones its Resource
// names in entity_refs when it has any, else a process entity and, when
// service.name is published, a service.instance entity.
func entitiesOf(p *scan.Process) []entity {
	attrs := resourceAttributes(p)
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
	out := []entity{{
		typ:   entityTypeProcess,
		id:    pick(attrs, []string{attrProcessPID, attrProcessCreationTime}),
		attrs: pick(attrs, []string{attrExecutableName, attrExecutablePath}),
	}}
	if _, ok := processctx.Lookup(attrs, "service.name"); ok {
		out = append(out, entity{
			typ:   entityTypeServiceInst,
			id:    pick(attrs, []string{"service.name", "service.namespace", "service.instance.id"}),
			attrs: pick(attrs, []string{"service.version"}),
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

// eventBuilder accumulates entity events into one plog.Logs: one
// ResourceLogs per process, one LogRecord per event.
type eventBuilder struct {
	logs     plog.Logs
	interval time.Duration
	now      pcommon.Timestamp
	counts   map[string]int64
	claims   *claims
}

func newEventBuilder(interval time.Duration, now time.Time, cl *claims) *eventBuilder {
	return &eventBuilder{logs: plog.NewLogs(), interval: interval, now: pcommon.NewTimestampFromTime(now), counts: map[string]int64{}, claims: cl}
}

// add appends one ResourceLogs for p with a state event for each of states
// and a delete event for each of deletes.
func (b *eventBuilder) add(p *scan.Process, states, deletes []entity) {
	if len(states) == 0 && len(deletes) == 0 {
		return
	}
	rl := b.logs.ResourceLogs().AppendEmpty()
	pdataconv.PutAttributes(rl.Resource().Attributes(), resourceAttributes(p))
	rl.Resource().SetDroppedAttributesCount(p.Context.Resource.DroppedAttributesCount)
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName(metadata.ScopeName)
	sl.Scope().Attributes().PutBool(attrEventAsLog, true)
	for _, e := range deletes {
		b.record(sl, e, eventTypeDelete)
	}
	for _, e := range states {
		b.record(sl, e, eventTypeState)
	}
}

func (b *eventBuilder) record(sl plog.ScopeLogs, e entity, eventType string) {
	lr := sl.LogRecords().AppendEmpty()
	lr.SetTimestamp(b.now)
	lr.SetObservedTimestamp(b.now)
	a := lr.Attributes()
	a.PutStr(attrEventType, eventType)
	a.PutStr(attrEntityType, pdataconv.Str(e.typ))
	pdataconv.PutAttributes(a.PutEmptyMap(attrEntityID), e.id)
	if eventType == eventTypeState {
		pdataconv.PutAttributes(a.PutEmptyMap(attrEntityAttributes), e.attrs)
		a.PutInt(attrEntityInterval, b.interval.Milliseconds())
	}
	b.counts[eventType]++
}

// found announces every entity of a new process.
func (b *eventBuilder) found(p *scan.Process) {
	ents := entitiesOf(p)
	b.claims.announce(p.ID, ents)
	b.add(p, ents, nil)
}

// lost deletes the entities of a process that went away that no other
// process announces.
func (b *eventBuilder) lost(p *scan.Process) {
	b.add(p, nil, only(entitiesOf(p), b.claims.withdraw(p.ID)))
}

// updated deletes the entities that no process announces any more (under
// the previous resource) and announces the current ones.
func (b *eventBuilder) updated(prev, cur *scan.Process) {
	now := entitiesOf(cur)
	orphaned := b.claims.announce(cur.ID, now)
	b.add(prev, nil, only(entitiesOf(prev), orphaned))
	b.add(cur, now, nil)
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

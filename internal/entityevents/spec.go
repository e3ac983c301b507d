// SPDX-License-Identifier: Apache-2.0

//go:build linux

package entityevents

import (
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/pdataconv"
)

// The entity events specification's form (event_format: spec).
const (
	specEventState         = "entity.state"
	specEventDelete        = "entity.delete"
	specEntityType         = "entity.type"
	specEntityID           = "entity.id"
	specEntityDescription  = "entity.description"
	specEntityInterval     = "entity.report.interval"
	specEntityDeleteReason = "entity.delete.reason"
	specRelationships      = "entity.relationships"
	specRelationshipType   = "relationship.type"

	relRunsOn      = "runs_on"
	entityTypeHost = "host"

	// Delete reasons: the process exited or stopped publishing; an update
	// replaced the entity's identity.
	deleteTerminated = "terminated"
	deleteReplaced   = "replaced"
)

// specRecord writes e's event in the specification's form: the event name,
// entity.id values as strings (the specification requires them), the
// description, the report interval in seconds and the relationships.
func (b *Builder) specRecord(lr plog.LogRecord, e entity, eventType, reason string) {
	a := lr.Attributes()
	a.PutStr(specEntityType, pdataconv.Str(e.typ))
	putStringMap(a.PutEmptyMap(specEntityID), e.id)
	if eventType == EventTypeDelete {
		lr.SetEventName(specEventDelete)
		if reason != "" {
			a.PutStr(specEntityDeleteReason, reason)
		}
		return
	}
	lr.SetEventName(specEventState)
	pdataconv.PutAttributes(a.PutEmptyMap(specEntityDescription), e.attrs)
	a.PutInt(specEntityInterval, int64(b.interval/time.Second))
	if len(e.rels) == 0 {
		return
	}
	rels := a.PutEmptySlice(specRelationships)
	for _, r := range e.rels {
		m := rels.AppendEmpty().SetEmptyMap()
		m.PutStr(specRelationshipType, pdataconv.Str(r.typ))
		m.PutStr(specEntityType, pdataconv.Str(r.targetType))
		putStringMap(m.PutEmptyMap(specEntityID), r.targetID)
	}
}

// putStringMap puts attrs as strings, invalid UTF-8 replaced as in the
// legacy form (a strict receiver refuses a batch holding any).
func putStringMap(m interface{ PutStr(k, v string) }, attrs []processctx.Attribute) {
	for _, x := range attrs {
		m.PutStr(pdataconv.Str(x.Key), pdataconv.Str(valueKey(x.Value)))
	}
}

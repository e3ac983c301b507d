// SPDX-License-Identifier: Apache-2.0

//go:build linux

package entityevents

import (
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
)

// The mark on the events of a process named by its environment alone
// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES; no published context): on
// its resource and on its service.instance's description.
const (
	AttrResourceSource = "otelctx.resource.source"
	SourceEnvironment  = "environment"
)

// envResource is the resource of a process named by its environment alone:
// its environment's attributes (its Context.Resource, as a publisher's),
// then what the receiver observed, then the source mark.
func (b *Builder) envResource(p *publisher.Process) []processctx.Attribute {
	return append(b.resource(p), processctx.Attribute{Key: AttrResourceSource, Value: str(SourceEnvironment)})
}

// envEntities are the entities of a process named by its environment:
// those of a publisher with its resource, the service.instance described
// with its source too.
func envEntities(p *publisher.Process, attrs []processctx.Attribute) []entity {
	ents := entitiesOf(p, attrs)
	mark := processctx.Attribute{Key: AttrResourceSource, Value: str(SourceEnvironment)}
	for i := range ents {
		if ents[i].typ == entityTypeServiceInst {
			ents[i].attrs = append(ents[i].attrs, mark)
		}
	}
	return ents
}

// FoundFromEnvironment announces the entities of a process named by its
// environment alone.
func (b *Builder) FoundFromEnvironment(p *publisher.Process) {
	attrs := b.envResource(p)
	ents := envEntities(p, attrs)
	b.claims.announce(p.ID, ents)
	b.add(p, attrs, ents, nil, "")
}

// LostFromEnvironment deletes the entities of a process named by its
// environment that no other process announces.
func (b *Builder) LostFromEnvironment(p *publisher.Process) {
	attrs := b.envResource(p)
	b.add(p, attrs, nil, only(envEntities(p, attrs), b.claims.withdraw(p.ID)), deleteTerminated)
}

// ReplacedByPublished deletes the entities of a process named by its
// environment that now publishes a context, when neither it (under its
// published resource) nor another process announces them.
func (b *Builder) ReplacedByPublished(p *publisher.Process) {
	attrs := b.envResource(p)
	ents := envEntities(p, attrs)
	orphaned := map[string]bool{}
	for _, e := range ents {
		if k := e.key(); b.claims.holders[k] == 0 {
			orphaned[k] = true
		}
	}
	b.add(p, attrs, nil, only(ents, orphaned), deleteReplaced)
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package entityevents turns what the extension finds of processes into
// entity events: the entities a process announces (process, and
// service.instance when it names its service), their identity keys, which
// of them a lost or updated process deletes (only those no live process
// still announces: claims), where a process runs (host, container, pod),
// and the two forms of the log records (collector-contrib's and the entity
// events specification's). The processctx receiver schedules and sends
// them.
package entityevents

import (
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelctx/otelctx/internal/hostinfo"
)

// Announcer is what outlives a round: the entities each process announces,
// and where the processes run. Owned by one goroutine (the receiver's
// subscription to the watcher's rounds).
type Announcer struct {
	claims   *claims
	site     *site
	interval time.Duration
	spec     bool
	scope    string
}

// NewAnnouncer announces entities whose state repeats every interval, in
// the specification's form if spec (else collector-contrib's), under the
// instrumentation scope named scope.
func NewAnnouncer(interval time.Duration, spec bool, scope string) *Announcer {
	return &Announcer{claims: newClaims(), interval: interval, spec: spec, scope: scope}
}

// Locate says where the processes run: host h, Kubernetes node nodeName
// ("" for none); each process's container and pod are its own.
func (a *Announcer) Locate(h hostinfo.Host, nodeName string) { a.site = newSite(h, nodeName) }

// Round starts the events of one round, taken at now.
func (a *Announcer) Round(now time.Time) *Builder {
	b := newEventBuilder(a.interval, now, a.claims)
	b.site, b.spec, b.scope = a.site, a.spec, a.scope
	return b
}

// Logs is the round's events: one ResourceLogs per process.
func (b *Builder) Logs() plog.Logs { return b.logs }

// Counts is how many events of each type (entity_state, entity_delete)
// the round holds.
func (b *Builder) Counts() map[string]int64 { return b.counts }

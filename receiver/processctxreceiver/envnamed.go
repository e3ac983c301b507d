// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"time"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/entityevents"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan/envscan"
	"github.com/otelctx/otelctx/internal/watcher"
)

// Processes named by their environment alone (environment_entities): the
// processes of the host that publish no process context and whose
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES name a resource, read
// through the extension's catalog (each environment once per process
// identity, bounded and time-limited there).

// The mark on the events of a process named by its environment alone
// (internal/entityevents writes it).
const (
	attrResourceSource = entityevents.AttrResourceSource
	sourceEnvironment  = entityevents.SourceEnvironment
)

// envNamed is one process announced for its environment.
type envNamed struct {
	p *publisher.Process
	// src is the catalog's process p was copied from: another one for the
	// same identity is the environment of a new image (an exec).
	src  *publisher.Process
	last time.Time // when its entity_state was last emitted
}

// envNamedSet holds the processes announced for their environment. Owned
// by the watcher's poll goroutine.
type envNamedSet struct {
	cat *catalog.Catalog
	// match: the extension's include and exclude (nil: every process),
	// tested before an environment is read.
	match func(pid int, exe string) bool
	// every: the environments are looked at about once per
	// collection_interval (prctl events make rounds more often; half of
	// it, so that a poll round a little early is not skipped).
	every, interval time.Duration
	lookedAt        time.Time
	procRoot        string
	known           map[publisher.ProcessID]*envNamed
}

func newEnvNamedSet(w *watcher.Watcher, interval time.Duration) *envNamedSet {
	cfg := w.Config()
	return &envNamedSet{
		cat: w.Catalog(), match: cfg.Filter(), every: cfg.CollectionInterval / 2, interval: interval,
		procRoot: procRoot, known: map[publisher.ProcessID]*envNamed{},
	}
}

// round announces the processes newly named by their environment, again
// those not announced for entity_interval, and deletes the entities of
// those that exited (or now publish, or no longer match).
func (s *envNamedSet) round(round watcher.Round, b *entityevents.Builder) {
	now := round.Time
	if !s.lookedAt.IsZero() && now.Sub(s.lookedAt) < s.every {
		return
	}
	s.lookedAt = now
	seen := make(map[publisher.ProcessID]bool, len(s.known))
	for _, pid := range envscan.PIDs(s.procRoot) {
		if _, published := round.Lookup(pid); published {
			continue
		}
		exe := ""
		if s.match != nil {
			if exe = envscan.ExecutableName(s.procRoot, pid); !s.match(pid, exe) {
				continue
			}
		}
		p, how := s.cat.ProcessFor(pid, 0, 0, catalog.Claims{})
		if how != catalog.Found || !catalog.NamedByEnvironment(p) {
			continue
		}
		seen[p.ID] = true
		if k, ok := s.known[p.ID]; ok {
			if k.src != p {
				// It exec'd: the old image's entities go, the new one's come.
				b.LostFromEnvironment(k.p)
				delete(s.known, p.ID)
			} else {
				if now.Sub(k.last) >= s.interval {
					b.FoundFromEnvironment(k.p)
					k.last = now
				}
				continue
			}
		}
		if s.match == nil {
			exe = envscan.ExecutableName(s.procRoot, pid)
		}
		q := *p // the catalog's entry is shared: the executable is the receiver's
		q.ExecutableName = exe
		s.known[p.ID] = &envNamed{p: &q, src: p, last: now}
		b.FoundFromEnvironment(&q)
	}
	for id, k := range s.known {
		if seen[id] {
			continue
		}
		if q, published := round.Lookup(id.PID); published && q.ID == id {
			// It publishes now: its announcement replaced these claims.
			b.ReplacedByPublished(k.p)
		} else {
			b.LostFromEnvironment(k.p)
		}
		delete(s.known, id)
	}
}

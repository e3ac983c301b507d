// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/entityevents"
	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/watcher"
	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

// procRoot is where the host's identity is read (the host PID namespace's
// procfs).
const procRoot = "/proc"

type processctxReceiver struct {
	set     receiver.Settings
	cfg     *Config
	next    consumer.Logs
	tel     *telemetry
	obsrecv *receiverhelper.ObsReport

	mu          sync.Mutex // guards the fields below against Start/Shutdown races
	started     bool
	cancel      context.CancelFunc
	unsubscribe func()
	sender      *sender

	// Owned by the watcher's poll goroutine (the subscription).
	// lastState is when each tracked process last had its entity_state
	// events emitted; due holds when each repeat is due. walked: the
	// processes tracked before the subscription were announced.
	lastState map[publisher.ProcessID]time.Time
	due       dueQueue
	announcer *entityevents.Announcer
	walked    bool
	// env: the processes named by their environment alone
	// (environment_entities; nil: off).
	env *envNamedSet
	// visits counts the tracked processes looked at for repeats, rounds
	// the rounds emitted (tests: a round with nothing due visits none).
	visits, rounds atomic.Int64
}

func newReceiver(set receiver.Settings, cfg *Config, next consumer.Logs) (*processctxReceiver, error) {
	tel, err := newTelemetry(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	obsrecv, err := receiverhelper.NewObsReport(receiverhelper.ObsReportSettings{
		ReceiverID:             set.ID,
		ReceiverCreateSettings: set,
	})
	if err != nil {
		return nil, err
	}
	return &processctxReceiver{
		set: set, cfg: cfg, next: next, tel: tel, obsrecv: obsrecv,
		lastState: map[publisher.ProcessID]time.Time{},
		announcer: entityevents.NewAnnouncer(cfg.EntityInterval, cfg.EventFormat == EventFormatSpec, metadata.ScopeName),
	}, nil
}

// Start subscribes to the rounds of the process_ctx extension named by
// extension:, which the collector has started before any pipeline.
func (r *processctxReceiver) Start(_ context.Context, host component.Host) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("process_ctx receiver: already started")
	}
	w, err := watcher.FromHost(host, r.cfg.Extension)
	if err != nil {
		return fmt.Errorf("process_ctx receiver: %w", err)
	}
	if ci := w.Config().CollectionInterval; r.cfg.EntityInterval < ci {
		return fmt.Errorf("process_ctx receiver: entity_interval (%v) must be at least the %s extension's collection_interval (%v)",
			r.cfg.EntityInterval, r.cfg.Extension, ci)
	}
	if r.cfg.EnvironmentEntities {
		if !w.Catalog().EnvironmentEnabled() {
			return fmt.Errorf("process_ctx receiver: environment_entities needs the %s extension's environment_resource (true by default)", r.cfg.Extension)
		}
		r.env = newEnvNamedSet(w, r.cfg.EntityInterval)
	}
	// Canceled at Shutdown: a downstream consumer that blocks must not keep
	// Shutdown waiting for the round being emitted.
	ctx, cancel := context.WithCancel(context.Background())
	r.started, r.cancel = true, cancel
	r.sender = newSender(ctx, r)
	r.announcer.Locate(hostinfo.HostOf(procRoot), r.cfg.K8sNodeName)
	r.unsubscribe = w.Subscribe(func(round watcher.Round) { r.emit(ctx, round) })
	r.set.Logger.Info("emitting entity events", zap.Stringer("extension", r.cfg.Extension),
		zap.Duration("entity_interval", r.cfg.EntityInterval))
	return nil
}

// Shutdown may be called without Start and more than once, as the
// collector requires.
func (r *processctxReceiver) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tel.Shutdown()
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	r.unsubscribe() // no emit runs after it returns
	err := r.sender.close(ctx)
	r.cancel, r.unsubscribe, r.sender = nil, nil, nil
	return err
}

// emit turns one round into entity events: its changes, and entity_state
// again for the processes not announced for entity_interval.
func (r *processctxReceiver) emit(ctx context.Context, round watcher.Round) {
	now := round.Time
	b := r.announcer.Round(now)
	for _, e := range round.Events {
		_, known := r.lastState[e.Process.ID]
		switch {
		case e.Kind == publisher.Lost:
			// A process lost before this receiver announced it (it
			// subscribed after the extension found it) was never stated.
			if known {
				b.Lost(e.Process)
				delete(r.lastState, e.Process.ID)
			}
			continue
		case e.Kind == publisher.Updated && known:
			b.Updated(e.Previous, e.Process)
		default:
			b.Found(e.Process)
		}
		r.announced(e.Process.ID, now)
	}
	if !r.walked {
		r.walked = true
		r.walkAll(round, b)
	} else {
		r.repeatDue(round, b)
	}
	if r.env != nil {
		r.env.round(round, b)
	}
	r.rounds.Add(1)
	if b.Logs().LogRecordCount() == 0 {
		return
	}
	r.sender.enqueue(ctx, batch{logs: b.Logs(), counts: b.Counts()})
}

// announced records that id's entity_state was emitted at now.
func (r *processctxReceiver) announced(id publisher.ProcessID, now time.Time) {
	r.lastState[id] = now
	r.due.add(now.Add(r.cfg.EntityInterval), id)
	r.due.compactIfStale(len(r.lastState), r.live)
}

// live reports whether d is the repeat due for its process's last
// announcement (else it is stale: the process was announced again, or lost).
func (r *processctxReceiver) live(d dueState) bool {
	last, known := r.lastState[d.id]
	return known && last.Add(r.cfg.EntityInterval).Equal(d.at)
}

// walkAll states, on the first round, the processes the extension tracked
// before this receiver subscribed (they had no event for it).
func (r *processctxReceiver) walkAll(round watcher.Round, b *entityevents.Builder) {
	round.Processes(func(p *publisher.Process) {
		r.visits.Add(1)
		if _, ok := r.lastState[p.ID]; !ok {
			b.Found(p)
			r.announced(p.ID, round.Time)
		}
	})
}

// repeatDue states again the tracked processes whose repeat is due: only
// those, not every tracked process.
func (r *processctxReceiver) repeatDue(round watcher.Round, b *entityevents.Builder) {
	now := round.Time
	for {
		d, ok := r.due.popDue(now)
		if !ok {
			return
		}
		if !r.live(d) {
			continue // lost, or announced again since: a later entry is queued
		}
		r.visits.Add(1)
		p, ok := round.Lookup(d.id.PID)
		if !ok || p.ID != d.id {
			continue // no longer tracked: its Lost event deletes lastState
		}
		b.Found(p)
		r.announced(p.ID, now)
	}
}

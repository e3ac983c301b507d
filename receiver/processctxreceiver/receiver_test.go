// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/internal/entityevents"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
	"github.com/otelctx/otelctx/internal/watcher"
	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LongLived...) }

// eventually waits for cond (testenv.Eventually).
var eventually = testenv.Eventually

// event is a record the sink got: its event name (the specification's
// form; none in collector-contrib's), resource and attributes.
type event struct {
	name string
	res  map[string]any
	rec  map[string]any
}

// The collector-contrib form's keys and entity types the tests look for
// (internal/entityevents writes them).
const (
	attrEventType         = "otel.entity.event.type"
	attrEntityType        = "otel.entity.type"
	attrEntityID          = "otel.entity.id"
	attrEntityInterval    = "otel.entity.interval"
	entityTypeProcess     = "process"
	entityTypeServiceInst = "service.instance"
)

// sinkEvents is every event the sink got: its resource and attributes.
func sinkEvents(sink *consumertest.LogsSink) []event {
	var out []event
	for _, l := range sink.AllLogs() {
		for _, rl := range l.ResourceLogs().All() {
			for _, sl := range rl.ScopeLogs().All() {
				for _, lr := range sl.LogRecords().All() {
					out = append(out, event{lr.EventName(), rl.Resource().Attributes().AsRaw(), lr.Attributes().AsRaw()})
				}
			}
		}
	}
	return out
}

// find returns the events for pid matching type and entity type.
func find(events []event, pid int, eventType, entityType string) []event {
	var out []event
	for _, e := range events {
		if e.res["process.pid"] == int64(pid) && e.rec[attrEventType] == eventType && e.rec[attrEntityType] == entityType {
			out = append(out, e)
		}
	}
	return out
}

// startReceiver starts a watcher with wcfg (its telemetry and the
// receiver's to tel if not nil) and a receiver on it with entity_interval
// 1h; both are shut down when the test ends.
func startReceiver(t *testing.T, wcfg *watcher.Config, tel *componenttest.Telemetry) (*consumertest.LogsSink, *watcher.Watcher) {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	cfg.EntityInterval = time.Hour
	return startWith(t, wcfg, cfg, tel)
}

// startWith is startReceiver with the receiver's configuration cfg.
func startWith(t *testing.T, wcfg *watcher.Config, cfg *Config, tel *componenttest.Telemetry) (*consumertest.LogsSink, *watcher.Watcher) {
	t.Helper()
	t.Parallel() // each test has its own watcher, catalog and publishers
	sink := new(consumertest.LogsSink)
	set := receivertest.NewNopSettings(metadata.Type)
	wset := watcher.Settings{Logger: set.Logger}
	if tel != nil {
		set.TelemetrySettings = tel.NewTelemetrySettings()
		wset.Telemetry = watcherTelemetry(t, tel)
	}
	w := watchertest.Start(t, wset, wcfg)
	startOn(t, set, w, cfg, sink)
	return sink, w
}

// startOn starts a receiver on w, shut down when the test ends.
func startOn(t *testing.T, set receiver.Settings, w *watcher.Watcher, cfg *Config, next consumer.Logs) *processctxReceiver {
	t.Helper()
	rcv, err := newReceiver(set, cfg, next)
	if err != nil {
		t.Fatal(err)
	}
	host := watchertest.NewHost().Add(component.MustNewID("process_ctx"), w)
	if err := rcv.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rcv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return rcv
}

// nopComponent is an extension that is not a process_ctx one.
type nopComponent struct{}

func (nopComponent) Start(context.Context, component.Host) error { return nil }
func (nopComponent) Shutdown(context.Context) error              { return nil }

// Create, Shutdown without Start, Start on a host with the extension, a
// refused second Start, Shutdown twice; Start names a missing extension, a
// component that is not one, and an entity_interval shorter than the
// extension's collection_interval.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	f := NewFactory()
	if err := componenttest.CheckConfigStruct(f.CreateDefaultConfig()); err != nil {
		t.Fatal(err)
	}
	set := receivertest.NewNopSettings(metadata.Type)
	create := func(cfg component.Config) receiver.Logs {
		t.Helper()
		rcv, err := f.CreateLogs(context.Background(), set, cfg, consumertest.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		return rcv
	}
	if err := create(f.CreateDefaultConfig()).Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	w, err := watcher.New(watcher.Settings{}, *watchertest.FastConfig(1 << 22))
	if err != nil {
		t.Fatal(err)
	}
	host := watchertest.NewHost().Add(component.MustNewID("process_ctx"), w).
		AddComponent(component.MustNewIDWithName("process_ctx", "other"), nopComponent{})
	for range 2 { // a second create/start/stop with the same ID works: nothing is global
		rcv := create(f.CreateDefaultConfig())
		if err := rcv.Start(context.Background(), host); err != nil {
			t.Fatal(err)
		}
		if err := rcv.Start(context.Background(), host); err == nil {
			t.Fatal("a second Start must fail, not subscribe twice")
		}
		for range 2 {
			if err := rcv.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		id       component.ID
		interval time.Duration
		want     string
	}{
		{component.MustNewIDWithName("process_ctx", "missing"), time.Hour,
			"process_ctx receiver: no extension \"process_ctx/missing\" in this collector: add `process_ctx/missing: {}` under extensions: and list it in service.extensions"},
		{component.MustNewIDWithName("process_ctx", "other"), time.Hour,
			"process_ctx receiver: extension \"process_ctx/other\" is not a process_ctx extension"},
		{component.MustNewID("process_ctx"), time.Millisecond,
			"entity_interval (1ms) must be at least the process_ctx extension's collection_interval (20ms)"},
	} {
		cfg := createDefaultConfig().(*Config)
		cfg.Extension, cfg.EntityInterval = tc.id, tc.interval
		rcv := create(cfg)
		if err := rcv.Start(context.Background(), host); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start: %v, want %q", err, tc.want)
		}
		if err := rcv.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEntityEventsFromRealPublisher(t *testing.T) {
	for _, libc := range testpub.Libcs {
		t.Run(string(libc), func(t *testing.T) {
			pub := testpub.Start(t, libc)
			pub.Set("service.name", "checkout", "service.instance.id", "inst-1", "service.version", "1.0")
			pub.Do("setint worker.count 8")
			pub.Publish()

			tel := componenttest.NewTelemetry()
			t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
			sink, w := startReceiver(t, watchertest.FastConfig(pub.PID), tel)
			cat := w.Catalog()

			eventually(t, "entity_state for the publisher", func() bool {
				return len(find(sinkEvents(sink), pub.PID, entityevents.EventTypeState, entityTypeServiceInst)) > 0
			})
			e := find(sinkEvents(sink), pub.PID, entityevents.EventTypeState, entityTypeServiceInst)[0]
			if e.res["service.name"] != "checkout" || e.res["worker.count"] != int64(8) || e.res["process.creation.time"] == nil {
				t.Fatalf("resource: %v", e.res)
			}
			if id := e.rec[attrEntityID].(map[string]any); id["service.instance.id"] != "inst-1" {
				t.Fatalf("id: %v", id)
			}
			if p, ok := cat.Process(pub.PID); !ok || p.ID.PID != pub.PID {
				t.Fatal("catalog lacks the publisher")
			}

			// A new instance id: the old service.instance is deleted.
			pub.Set("service.instance.id", "inst-2")
			pub.Publish()
			eventually(t, "entity_delete of inst-1", func() bool {
				for _, e := range find(sinkEvents(sink), pub.PID, entityevents.EventTypeDelete, entityTypeServiceInst) {
					if e.rec[attrEntityID].(map[string]any)["service.instance.id"] == "inst-1" {
						return true
					}
				}
				return false
			})
			eventually(t, "entity_state of inst-2", func() bool {
				for _, e := range find(sinkEvents(sink), pub.PID, entityevents.EventTypeState, entityTypeServiceInst) {
					if e.rec[attrEntityID].(map[string]any)["service.instance.id"] == "inst-2" {
						return true
					}
				}
				return false
			})

			pub.Exit()
			eventually(t, "entity_delete of the process", func() bool {
				return len(find(sinkEvents(sink), pub.PID, entityevents.EventTypeDelete, entityTypeProcess)) > 0
			})
			eventually(t, "catalog forgets the process", func() bool { _, ok := cat.Process(pub.PID); return !ok })

			for _, name := range []string{"otelcol_processctx_processes_scanned", "otelcol_processctx_polls", "otelcol_processctx_entity_events"} {
				if telemetrytest.Sum(tel, name, "", "") == 0 {
					t.Errorf("%s not recorded", name)
				}
			}
		})
	}
}

func TestPeriodicEntityState(t *testing.T) {
	pub := testpub.Start(t, testpub.Glibc)
	pub.Set("service.name", "periodic")
	pub.Publish()
	wcfg := watchertest.FastConfig(pub.PID)
	cfg := createDefaultConfig().(*Config)
	cfg.EntityInterval = 3 * wcfg.CollectionInterval
	sink, _ := startWith(t, wcfg, cfg, nil)
	eventually(t, "three periodic entity_state events", func() bool {
		return len(find(sinkEvents(sink), pub.PID, entityevents.EventTypeState, entityTypeProcess)) >= 3
	})
	e := find(sinkEvents(sink), pub.PID, entityevents.EventTypeState, entityTypeProcess)[0]
	if e.rec[attrEntityInterval] != int64(60) {
		t.Fatalf("otel.entity.interval = %v, want 60", e.rec[attrEntityInterval])
	}
}

func TestBrokenPublisherIsCountedNotAnnounced(t *testing.T) {
	pub := testpub.Start(t, testpub.Glibc)
	pub.Do("garbage 64")
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	sink, _ := startReceiver(t, watchertest.FastConfig(pub.PID), tel)
	eventually(t, "reads_failed{reason=malformed_payload}", func() bool {
		return telemetrytest.Sum(tel, "otelcol_processctx_reads_failed", "reason", "malformed_payload") > 0
	})
	for _, e := range sinkEvents(sink) {
		if e.res["process.pid"] == int64(pub.PID) {
			t.Fatalf("garbage publisher announced: %v", e)
		}
	}
}

// Between discoveries the receiver only polls: a known publisher's update
// is announced, a new publisher is not (until the next discovery round).
func TestPollRoundsBetweenDiscoveries(t *testing.T) {
	a := testpub.Start(t, testpub.Glibc)
	a.Set("service.name", "a", "service.instance.id", "a-1")
	a.Publish()
	b := testpub.Start(t, testpub.Glibc)
	cfg := watchertest.FastConfig(a.PID, b.PID)
	cfg.DiscoveryInterval, cfg.RecheckInterval = time.Hour, time.Hour
	sink, _ := startReceiver(t, cfg, nil)
	eventually(t, "a announced by the first (discovery) round", func() bool {
		return len(find(sinkEvents(sink), a.PID, entityevents.EventTypeState, entityTypeServiceInst)) > 0
	})

	b.Set("service.name", "b")
	b.Publish()
	a.Set("service.instance.id", "a-2")
	a.Publish()
	eventually(t, "a's update announced by a poll round", func() bool {
		for _, e := range find(sinkEvents(sink), a.PID, entityevents.EventTypeState, entityTypeServiceInst) {
			if e.rec[attrEntityID].(map[string]any)["service.instance.id"] == "a-2" {
				return true
			}
		}
		return false
	})
	if n := len(find(sinkEvents(sink), b.PID, entityevents.EventTypeState, entityTypeProcess)); n != 0 {
		t.Fatalf("b announced without a discovery round (%d events)", n)
	}
}

// Rounds where no entity_state repeat is due look at no tracked process:
// the repeats come from a due-time queue, not from a walk of every process.
func TestRoundsWithNothingDueVisitNoProcess(t *testing.T) {
	pub := testpub.Start(t, testpub.Glibc)
	pub.Set("service.name", "idle")
	pub.Publish()
	wcfg := watchertest.FastConfig(pub.PID)
	cfg := createDefaultConfig().(*Config)
	cfg.EntityInterval = time.Hour
	set := receivertest.NewNopSettings(metadata.Type)
	sink := new(consumertest.LogsSink)
	t.Parallel()
	w := watchertest.Start(t, watcher.Settings{Logger: set.Logger}, wcfg)
	rcv := startOn(t, set, w, cfg, sink)
	eventually(t, "the publisher's entity_state", func() bool {
		return len(find(sinkEvents(sink), pub.PID, entityevents.EventTypeState, entityTypeProcess)) > 0
	})
	visits, rounds := rcv.visits.Load(), rcv.rounds.Load()
	eventually(t, "ten more rounds", func() bool { return rcv.rounds.Load() >= rounds+10 })
	if got := rcv.visits.Load(); got != visits {
		t.Fatalf("%d process visits on rounds with no repeat due, want 0", got-visits)
	}
	if n := len(find(sinkEvents(sink), pub.PID, entityevents.EventTypeState, entityTypeProcess)); n != 1 {
		t.Fatalf("%d entity_state events for the publisher, want 1", n)
	}
}

// Two real publishers announce the same service.instance (one publishes
// the other's service.instance.id, and a published executable): the
// spoofer's exit deletes only its process entity; the victim's exit
// deletes the service.instance. The observed executable is reported.
func TestSpooferExitKeepsVictimEntity(t *testing.T) {
	victim, spoof := testpub.Start(t, testpub.Glibc), testpub.Start(t, testpub.Glibc)
	victim.Set("service.name", "checkout", "service.instance.id", "inst-1")
	victim.Publish()
	spoof.Set("service.name", "checkout", "service.instance.id", "inst-1",
		"process.executable.path", "/usr/bin/checkout", "process.executable.name", "checkout")
	spoof.Publish()
	sink, _ := startReceiver(t, watchertest.FastConfig(victim.PID, spoof.PID), nil)
	eventually(t, "both publishers announced", func() bool {
		ev := sinkEvents(sink)
		return len(find(ev, victim.PID, entityevents.EventTypeState, entityTypeServiceInst)) > 0 &&
			len(find(ev, spoof.PID, entityevents.EventTypeState, entityTypeServiceInst)) > 0
	})
	if e := find(sinkEvents(sink), spoof.PID, entityevents.EventTypeState, entityTypeProcess)[0]; e.res["process.executable.path"] == "/usr/bin/checkout" {
		t.Errorf("the published executable replaced the observed one: %v", e.res)
	}
	spoof.Exit()
	eventually(t, "the spoofer's process deleted", func() bool {
		return len(find(sinkEvents(sink), spoof.PID, entityevents.EventTypeDelete, entityTypeProcess)) > 0
	})
	// The service.instance would have been deleted in the same batch.
	if d := find(sinkEvents(sink), spoof.PID, entityevents.EventTypeDelete, entityTypeServiceInst); len(d) > 0 {
		t.Fatalf("the spoofer's exit deleted the victim's service.instance: %v", d[0].rec)
	}
	victim.Exit()
	eventually(t, "the victim's service.instance deleted", func() bool {
		return len(find(sinkEvents(sink), victim.PID, entityevents.EventTypeDelete, entityTypeServiceInst)) > 0
	})
}

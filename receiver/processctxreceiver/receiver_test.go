package processctxreceiver

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/testpub"
	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitTimeout = 20 * time.Second

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

type event struct {
	res map[string]any
	rec map[string]any
}

func sinkEvents(sink *consumertest.LogsSink) []event {
	var out []event
	for _, l := range sink.AllLogs() {
		for _, r := range records(l) {
			out = append(out, event{r.res, r.rec})
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

func startReceiver(t *testing.T, cfg *Config, tel *componenttest.Telemetry) (*consumertest.LogsSink, component.Component, *catalog.Catalog) {
	t.Helper()
	sink := new(consumertest.LogsSink)
	set := receivertest.NewNopSettings(metadata.Type)
	if tel != nil {
		set.TelemetrySettings = tel.NewTelemetrySettings()
	}
	rcv, err := NewFactory().CreateLogs(context.Background(), set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rcv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	cat, ok := catalog.Find(set.ID)
	if !ok {
		t.Fatal("receiver did not register its catalog")
	}
	receivers.Store(cat, rcv.(*processctxReceiver))
	t.Cleanup(func() { receivers.Delete(cat) })
	return sink, rcv, cat
}

func fastConfig(pids ...int) *Config {
	cfg := createDefaultConfig().(*Config)
	cfg.CollectionInterval = 20 * time.Millisecond
	cfg.DiscoveryInterval = 20 * time.Millisecond
	cfg.RecheckInterval = 20 * time.Millisecond
	cfg.EntityInterval = time.Hour
	cfg.Include.PIDs = pids // keep the host's other processes out of the test
	// Thread sampling only where a test asks for it: auto would load the
	// eBPF sampler (or ptrace the test's children) in every test.
	cfg.ThreadSampler = ThreadSamplerOff
	return cfg
}

func TestLifecycle(t *testing.T) {
	f := NewFactory()
	if err := componenttest.CheckConfigStruct(f.CreateDefaultConfig()); err != nil {
		t.Fatal(err)
	}
	set := receivertest.NewNopSettings(metadata.Type)
	rcv, err := f.CreateLogs(context.Background(), set, f.CreateDefaultConfig(), consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	// The catalog exists from creation on: processors start before receivers.
	if _, ok := catalog.Find(set.ID); !ok {
		t.Fatal("catalog not registered at creation")
	}
	// Shutdown before Start must be safe, and releases the catalog.
	if err := rcv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := catalog.Find(set.ID); ok {
		t.Fatal("catalog still registered after shutdown of an unstarted receiver")
	}
	for i := 0; i < 2; i++ { // a second create/start/stop with the same ID works
		rcv, err := f.CreateLogs(context.Background(), set, f.CreateDefaultConfig(), consumertest.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		if err := rcv.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Fatal(err)
		}
		if _, ok := catalog.Find(set.ID); !ok {
			t.Fatal("catalog not registered while running")
		}
		if err := rcv.Start(context.Background(), componenttest.NewNopHost()); err == nil {
			t.Fatal("a second Start must fail, not leak a second scanner")
		}
		if err := rcv.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, ok := catalog.Find(set.ID); ok {
			t.Fatal("catalog still registered after shutdown")
		}
		// A second Shutdown is a no-op (it must not close fds again).
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
			sink, _, cat := startReceiver(t, fastConfig(pub.PID), tel)

			eventually(t, "entity_state for the publisher", func() bool {
				return len(find(sinkEvents(sink), pub.PID, eventTypeState, entityTypeServiceInst)) > 0
			})
			e := find(sinkEvents(sink), pub.PID, eventTypeState, entityTypeServiceInst)[0]
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
				for _, e := range find(sinkEvents(sink), pub.PID, eventTypeDelete, entityTypeServiceInst) {
					if e.rec[attrEntityID].(map[string]any)["service.instance.id"] == "inst-1" {
						return true
					}
				}
				return false
			})
			eventually(t, "entity_state of inst-2", func() bool {
				for _, e := range find(sinkEvents(sink), pub.PID, eventTypeState, entityTypeServiceInst) {
					if e.rec[attrEntityID].(map[string]any)["service.instance.id"] == "inst-2" {
						return true
					}
				}
				return false
			})

			pub.Exit()
			eventually(t, "entity_delete of the process", func() bool {
				return len(find(sinkEvents(sink), pub.PID, eventTypeDelete, entityTypeProcess)) > 0
			})
			eventually(t, "catalog forgets the process", func() bool { _, ok := cat.Process(pub.PID); return !ok })

			for _, name := range []string{"otelcol_processctx_processes_scanned", "otelcol_processctx_polls", "otelcol_processctx_entity_events"} {
				if sumOf(t, tel, name, "") == 0 {
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
	cfg := fastConfig(pub.PID)
	cfg.EntityInterval = 3 * cfg.CollectionInterval
	sink, _, _ := startReceiver(t, cfg, nil)
	eventually(t, "three periodic entity_state events", func() bool {
		return len(find(sinkEvents(sink), pub.PID, eventTypeState, entityTypeProcess)) >= 3
	})
	e := find(sinkEvents(sink), pub.PID, eventTypeState, entityTypeProcess)[0]
	if e.rec[attrEntityInterval] != int64(60) {
		t.Fatalf("otel.entity.interval = %v, want 60", e.rec[attrEntityInterval])
	}
}

func TestBrokenPublisherIsCountedNotAnnounced(t *testing.T) {
	pub := testpub.Start(t, testpub.Glibc)
	pub.Do("garbage 64")
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	sink, _, _ := startReceiver(t, fastConfig(pub.PID), tel)
	eventually(t, "reads_failed{reason=malformed_payload}", func() bool {
		return sumOf(t, tel, "otelcol_processctx_reads_failed", "malformed_payload") > 0
	})
	for _, e := range sinkEvents(sink) {
		if e.res["process.pid"] == int64(pub.PID) {
			t.Fatalf("garbage publisher announced: %v", e)
		}
	}
}

// sumOf sums an int64 counter's data points, optionally only those whose
// "reason" attribute is reason.
func sumOf(t *testing.T, tel *componenttest.Telemetry, name, reason string) int64 {
	t.Helper()
	if reason == "" {
		return sumWith(t, tel, name, "", "")
	}
	return sumWith(t, tel, name, "reason", reason)
}

// Between discoveries the receiver only polls: a known publisher's update
// is announced, a new publisher is not (until the next discovery round).
func TestPollRoundsBetweenDiscoveries(t *testing.T) {
	a := testpub.Start(t, testpub.Glibc)
	a.Set("service.name", "a", "service.instance.id", "a-1")
	a.Publish()
	b := testpub.Start(t, testpub.Glibc)
	cfg := fastConfig(a.PID, b.PID)
	cfg.DiscoveryInterval, cfg.RecheckInterval = time.Hour, time.Hour
	sink, _, _ := startReceiver(t, cfg, nil)
	eventually(t, "a announced by the first (discovery) round", func() bool {
		return len(find(sinkEvents(sink), a.PID, eventTypeState, entityTypeServiceInst)) > 0
	})

	b.Set("service.name", "b")
	b.Publish()
	a.Set("service.instance.id", "a-2")
	a.Publish()
	eventually(t, "a's update announced by a poll round", func() bool {
		for _, e := range find(sinkEvents(sink), a.PID, eventTypeState, entityTypeServiceInst) {
			if e.rec[attrEntityID].(map[string]any)["service.instance.id"] == "a-2" {
				return true
			}
		}
		return false
	})
	if n := len(find(sinkEvents(sink), b.PID, eventTypeState, entityTypeProcess)); n != 0 {
		t.Fatalf("b announced without a discovery round (%d events)", n)
	}
}

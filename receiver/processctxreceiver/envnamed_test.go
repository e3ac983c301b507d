// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxreceiver

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/otelctx/otelctx/internal/entityevents"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
	"github.com/otelctx/otelctx/internal/watcher"
	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

// envProcess starts a real process (sleep) whose environment is exactly
// env, publishing no process context.
func envProcess(t *testing.T, env ...string) *exec.Cmd { return testenv.Sleeper(t, env...) }

// startEnvReceiver starts a watcher watching pids and a receiver on it
// with cfg.
func startEnvReceiver(t *testing.T, cfg *Config, pids ...int) (*consumertest.LogsSink, *processctxReceiver) {
	t.Helper()
	t.Parallel()
	set := receivertest.NewNopSettings(metadata.Type)
	sink := new(consumertest.LogsSink)
	w := watchertest.Start(t, watcher.Settings{Logger: set.Logger}, watchertest.FastConfig(pids...))
	return sink, startOn(t, set, w, cfg, sink)
}

// TestEnvironmentEntities: with environment_entities, a real process that
// publishes nothing and sets only OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES gets a service.instance entity marked with its
// source, deleted when the process ends; one that sets neither gets none.
func TestEnvironmentEntities(t *testing.T) {
	for _, format := range []string{EventFormatLegacy, EventFormatSpec} {
		t.Run(format, func(t *testing.T) {
			named := envProcess(t, "OTEL_SERVICE_NAME=inventory",
				"OTEL_RESOURCE_ATTRIBUTES=service.namespace=shop,service.instance.id=inv-1,service.version=2.1,deployment.environment.name=prod%20eu")
			bare := envProcess(t, "PATH=/bin")
			cfg := createDefaultConfig().(*Config)
			cfg.EntityInterval, cfg.EventFormat, cfg.EnvironmentEntities = time.Hour, format, true
			sink, rcv := startEnvReceiver(t, cfg, named.Process.Pid, bare.Process.Pid)

			pid := named.Process.Pid
			states := func() []event {
				return findAny(sinkEvents(sink), pid, format, entityevents.EventTypeState, entityTypeServiceInst)
			}
			eventually(t, "the service.instance of the environment-named process", func() bool { return len(states()) > 0 })
			e := states()[0]
			for k, want := range map[string]any{
				"service.name": "inventory", "service.namespace": "shop", "service.instance.id": "inv-1",
				"deployment.environment.name": "prod eu", attrResourceSource: sourceEnvironment, "process.executable.name": "sleep",
			} {
				if e.res[k] != want {
					t.Errorf("resource %s = %v, want %v (%v)", k, e.res[k], want, e.res)
				}
			}
			id, desc := e.rec[attrEntityID], e.rec[attrEntityAttributes]
			if format == EventFormatSpec {
				id, desc = e.rec[specEntityID], e.rec[specEntityDescription]
			}
			if id := id.(map[string]any); id["service.name"] != "inventory" || id["service.instance.id"] != "inv-1" {
				t.Errorf("entity id: %v", id)
			}
			if desc := desc.(map[string]any); desc[attrResourceSource] != sourceEnvironment || desc["service.version"] != "2.1" {
				t.Errorf("entity attributes: %v", desc)
			}
			if len(findAny(sinkEvents(sink), pid, format, entityevents.EventTypeState, entityTypeProcess)) == 0 {
				t.Error("no process entity for the service.instance to run on")
			}

			// Rounds go on: the process is announced once (entity_interval
			// 1h), and the bare one never.
			rounds := rcv.rounds.Load()
			eventually(t, "ten more rounds", func() bool { return rcv.rounds.Load() >= rounds+10 })
			if n := len(states()); n != 1 {
				t.Errorf("%d entity_state events for the service.instance, want 1", n)
			}
			for _, ev := range sinkEvents(sink) {
				if ev.res["process.pid"] == int64(bare.Process.Pid) {
					t.Errorf("event for the process that names no service: %v", ev.rec)
				}
			}

			_ = named.Process.Kill()
			_ = named.Wait()
			eventually(t, "the service.instance deleted", func() bool {
				return len(findAny(sinkEvents(sink), pid, format, entityevents.EventTypeDelete, entityTypeServiceInst)) > 0
			})
			if len(findAny(sinkEvents(sink), pid, format, entityevents.EventTypeDelete, entityTypeProcess)) == 0 {
				t.Error("the process entity was not deleted with it")
			}
		})
	}
}

// TestEnvironmentEntitiesOffByDefault: by default, a process named by its
// environment alone gets no entity event.
func TestEnvironmentEntitiesOffByDefault(t *testing.T) {
	if createDefaultConfig().(*Config).EnvironmentEntities {
		t.Fatal("environment_entities is on by default")
	}
	named := envProcess(t, "OTEL_SERVICE_NAME=inventory", "OTEL_RESOURCE_ATTRIBUTES=service.instance.id=inv-1")
	cfg := createDefaultConfig().(*Config)
	cfg.EntityInterval = time.Hour
	sink, rcv := startEnvReceiver(t, cfg, named.Process.Pid)
	eventually(t, "ten rounds", func() bool { return rcv.rounds.Load() >= 10 })
	if n := len(sinkEvents(sink)); n != 0 {
		t.Fatalf("%d entity events, want none: %v", n, sinkEvents(sink)[0].rec)
	}
}

// environment_entities on an extension whose environment_resource is off
// fails at Start, saying which setting.
func TestEnvironmentEntitiesNeedEnvironmentResource(t *testing.T) {
	t.Parallel()
	wcfg := watchertest.FastConfig(1 << 22)
	wcfg.EnvironmentResource = false
	set := receivertest.NewNopSettings(metadata.Type)
	w := watchertest.Start(t, watcher.Settings{Logger: set.Logger}, wcfg)
	cfg := createDefaultConfig().(*Config)
	cfg.EnvironmentEntities = true
	rcv, err := newReceiver(set, cfg, consumertest.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	host := watchertest.NewHost().Add(component.MustNewID("process_ctx"), w)
	err = rcv.Start(context.Background(), host)
	if err == nil || !strings.Contains(err.Error(), "environment_resource") {
		t.Errorf("Start: %v, want it to name environment_resource", err)
	}
	if err := rcv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The keys of the two forms the tests below read.
const (
	attrEntityAttributes   = "otel.entity.attributes"
	specEntityType         = "entity.type"
	specEntityID           = "entity.id"
	specEntityDescription  = "entity.description"
	specEntityDeleteReason = "entity.delete.reason"
)

// findAny is find for either event form.
func findAny(events []event, pid int, format, eventType, entityType string) []event {
	if format == EventFormatLegacy {
		return find(events, pid, eventType, entityType)
	}
	var out []event
	for _, e := range events {
		if e.res["process.pid"] == int64(pid) && e.rec[specEntityType] == entityType &&
			(e.rec[specEntityDeleteReason] != nil) == (eventType == entityevents.EventTypeDelete) &&
			(e.rec[specEntityDescription] != nil) == (eventType == entityevents.EventTypeState) {
			out = append(out, e)
		}
	}
	return out
}

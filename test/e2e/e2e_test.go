// SPDX-License-Identifier: Apache-2.0

//go:build linux

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelctx/otelctx/internal/testutil/distrun"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// Bounds of every wait; the collector polls every 200ms, so events normally
// land within a second.
const (
	eventTimeout    = 30 * time.Second
	shutdownTimeout = 30 * time.Second
	pollEvery       = 50 * time.Millisecond
)

// Entity-event conventions (docs/entity-events.md), as the process_ctx receiver
// emits them.
const (
	attrEventAsLog = "otel.entity.event_as_log"
	attrEventType  = "otel.entity.event.type"
	attrEntityType = "otel.entity.type"
	attrEntityID   = "otel.entity.id"
	attrInterval   = "otel.entity.interval"
	eventState     = "entity_state"
	eventDelete    = "entity_delete"
)

// TestDistributionEntityEvents runs the built distribution against a real
// publisher: process_ctx receiver -> file exporter (JSON), then checks the
// state events of the publisher, the delete events when it exits, and a
// clean shutdown on SIGTERM.
func TestDistributionEntityEvents(t *testing.T) {
	bin := testenv.DistBinary(t)
	testenv.RequireRoot(t) // process_vm_readv of a process that is not the collector's child

	p := testpub.Start(t, testpub.Glibc)
	p.Set("service.name", "e2e-svc")
	p.Publish()

	dir := t.TempDir()
	out := filepath.Join(dir, "events.jsonl")
	col := startCollector(t, bin, dir, distrun.Config{
		PIDs: []int{p.PID}, CollectionInterval: 200 * time.Millisecond, EntityInterval: time.Minute, Entities: out,
	})

	// 1. The publisher is announced.
	isPublisher := func(e event) bool {
		return e.pid == int64(p.PID) && e.resource["service.name"] == "e2e-svc"
	}
	first := col.waitFor(t, out, "entity_state for the publisher (pid "+fmt.Sprint(p.PID)+", service.name=e2e-svc)",
		func(e event) bool { return e.typ == eventState && isPublisher(e) })
	if !first.eventAsLog {
		t.Errorf("scope attribute %s=true missing on %+v", attrEventAsLog, first)
	}
	if first.interval <= 0 {
		t.Errorf("%s = %d on a state event, want > 0", attrInterval, first.interval)
	}
	// Every entity announced for the publisher must be deleted later.
	announced := map[string]bool{}
	for _, e := range readEvents(t, out) {
		if e.typ == eventState && isPublisher(e) {
			announced[e.entityType] = true
		}
	}
	t.Logf("state events for pid %d: entity types %v", p.PID, keys(announced))
	if !announced["service.instance"] {
		t.Errorf("no service.instance entity announced for a publisher with service.name")
	}

	// 2. The publisher exits: each of its entities is deleted.
	p.Exit()
	for typ := range announced {
		col.waitFor(t, out, "entity_delete of the "+typ+" entity of pid "+fmt.Sprint(p.PID),
			func(e event) bool { return e.typ == eventDelete && e.entityType == typ && e.pid == int64(p.PID) })
	}

	// 3. SIGTERM: a clean shutdown.
	col.stop(t)
}

// collector is one running distribution process.
type collector struct{ *distrun.Collector }

// startCollector runs the distribution on cfg, its files in dir.
func startCollector(t *testing.T, bin, dir string, cfg distrun.Config) *collector {
	t.Helper()
	return &collector{distrun.StartConfig(t, bin, dir, cfg)}
}

// waitFor polls the exporter's file until an event satisfies match, the
// collector exits, or eventTimeout passes.
func (c *collector) waitFor(t *testing.T, path, what string, match func(event) bool) event {
	t.Helper()
	deadline := time.Now().Add(eventTimeout)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		events := readEvents(t, path)
		for _, e := range events {
			if match(e) {
				return e
			}
		}
		if c.Exited() {
			t.Fatalf("waiting for %s: collector exited (%v)", what, c.Err())
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, e := range events {
				fmt.Fprintf(&b, "\n  %s %s pid=%d resource=%v id=%v", e.typ, e.entityType, e.pid, e.resource, e.id)
			}
			t.Fatalf("no %s within %v; %d events in %s:%s", what, eventTimeout, len(events), path, b.String())
		}
		<-tick.C
	}
}

// stop sends SIGTERM and requires a clean exit within shutdownTimeout.
func (c *collector) stop(t *testing.T) {
	t.Helper()
	if err := c.Stop(shutdownTimeout); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.Log(), "Shutdown complete.") {
		t.Errorf("collector exited 0 but did not log \"Shutdown complete.\"")
	}
}

// event is one entity event (a log record) as the file exporter wrote it.
type event struct {
	typ        string // otel.entity.event.type
	entityType string // otel.entity.type
	id         map[string]any
	interval   int64
	pid        int64 // resource process.pid
	resource   map[string]any
	eventAsLog bool // scope attribute otel.entity.event_as_log
}

// readEvents decodes the complete lines of the exporter's file (one OTLP
// JSON ExportLogsServiceRequest per line); a line still being written is left
// for the next poll.
func readEvents(t *testing.T, path string) []event {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i]
	} else {
		return nil
	}
	var out []event
	var um plog.JSONUnmarshaler
	for n, line := range bytes.Split(data, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		logs, err := um.UnmarshalLogs(line)
		if err != nil {
			t.Fatalf("%s line %d: not OTLP JSON logs: %v\n%s", path, n+1, err, line)
		}
		for _, rl := range logs.ResourceLogs().All() {
			res := rl.Resource().Attributes()
			var pid int64
			if v, ok := res.Get("process.pid"); ok && v.Type() == pcommon.ValueTypeInt {
				pid = v.Int()
			}
			for _, sl := range rl.ScopeLogs().All() {
				asLog, ok := sl.Scope().Attributes().Get(attrEventAsLog)
				eventAsLog := ok && asLog.Type() == pcommon.ValueTypeBool && asLog.Bool()
				for _, lr := range sl.LogRecords().All() {
					a := lr.Attributes()
					e := event{
						typ:        str(a, attrEventType),
						entityType: str(a, attrEntityType),
						pid:        pid,
						resource:   res.AsRaw(),
						eventAsLog: eventAsLog,
					}
					if id, ok := a.Get(attrEntityID); ok && id.Type() == pcommon.ValueTypeMap {
						e.id = id.Map().AsRaw()
					}
					if iv, ok := a.Get(attrInterval); ok && iv.Type() == pcommon.ValueTypeInt {
						e.interval = iv.Int()
					}
					out = append(out, e)
				}
			}
		}
	}
	return out
}

func str(m pcommon.Map, k string) string {
	if v, ok := m.Get(k); ok {
		return v.AsString()
	}
	return ""
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

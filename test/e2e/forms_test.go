// SPDX-License-Identifier: Apache-2.0

//go:build linux

package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/experimentalmetricmetadata"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelctx/otelctx/internal/hostinfo"
	"github.com/otelctx/otelctx/internal/testutil/distrun"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// TestDistributionEntityEventForms runs the built distribution against a
// real publisher once per event_format and reads what its file exporter
// wrote: legacy events as collector-contrib's pkg/experimentalmetricmetadata
// decodes them (its feature gate off, its default), spec events against the
// entity events specification's attribute table; in both, the state events
// of the publisher, their deletes once it exits, and the host's identity on
// every resource.
func TestDistributionEntityEventForms(t *testing.T) {
	bin := testenv.DistBinary(t)
	testenv.RequireRoot(t)
	host := hostinfo.HostOf("/proc") // the host the distribution runs on, read as it reads it
	if host.ID == "" {
		testenv.Missing(t, "this host has no machine-id or DMI product UUID (host.id)")
	}
	for _, format := range []string{"legacy", "spec"} {
		t.Run(format, func(t *testing.T) {
			p := testpub.Start(t, testpub.Glibc)
			p.Set("service.name", "forms-svc", "service.instance.id", "i-1", "service.version", "1.2")
			p.Publish()
			dir := t.TempDir()
			out := filepath.Join(dir, "events.jsonl")
			col := startCollector(t, bin, dir, distrun.Config{
				PIDs: []int{p.PID}, CollectionInterval: 200 * time.Millisecond, EntityInterval: time.Minute,
				EventFormat: format, Entities: out,
			})
			check := checkLegacy
			if format == "spec" {
				check = checkSpec
			}
			states := col.waitLogs(t, out, "state events of the process and service.instance entities", func(ls []plog.Logs) bool {
				return len(check(t, ls, p.PID, host, false)["state"]) == 2
			})
			check(t, states, p.PID, host, true)
			p.Exit()
			col.waitLogs(t, out, "delete events of both entities", func(ls []plog.Logs) bool {
				return len(check(t, ls, p.PID, host, false)["delete"]) == 2
			})
			col.stop(t)
			seen := check(t, readLogs(t, out), p.PID, host, true)
			for _, kind := range []string{"state", "delete"} {
				if slices.Sort(seen[kind]); !slices.Equal(seen[kind], []string{"process", "service.instance"}) {
					t.Errorf("%s events of entity types %v, want process and service.instance", kind, seen[kind])
				}
			}
		})
	}
}

// resourcesOf yields the scope logs of pid's resources, failing (when
// strict) those that lack the host's identity.
func resourcesOf(t *testing.T, ls []plog.Logs, pid int, host hostinfo.Host, strict bool, fn func(plog.ScopeLogs)) {
	t.Helper()
	for _, l := range ls {
		for _, rl := range l.ResourceLogs().All() {
			res := rl.Resource().Attributes()
			if v, ok := res.Get("process.pid"); !ok || v.Int() != int64(pid) {
				continue
			}
			if strict && (str(res, "host.id") != host.ID || str(res, "host.name") != host.Name) {
				t.Errorf("resource %v: want host.id %q, host.name %q", res.AsRaw(), host.ID, host.Name)
			}
			for _, sl := range rl.ScopeLogs().All() {
				fn(sl)
			}
		}
	}
}

// checkLegacy decodes pid's events with collector-contrib's decoder and
// returns the entity types seen per event kind ("state", "delete").
func checkLegacy(t *testing.T, ls []plog.Logs, pid int, host hostinfo.Host, strict bool) map[string][]string {
	t.Helper()
	seen := map[string][]string{}
	resourcesOf(t, ls, pid, host, strict, func(sl plog.ScopeLogs) {
		evs := experimentalmetricmetadata.NewEntityEventsSliceFromLogs(sl.LogRecords())
		for i := range evs.Len() {
			e := evs.At(i)
			switch e.EventType() {
			case experimentalmetricmetadata.EventTypeState:
				d := e.EntityStateDetails()
				seen["state"] = appendNew(seen["state"], d.EntityType())
				if strict && (d.Interval() != time.Minute || e.ID().Len() == 0) {
					t.Errorf("legacy state of %s: interval %v, id %v", d.EntityType(), d.Interval(), e.ID().AsRaw())
				}
				if v, _ := d.Attributes().Get("service.version"); strict && d.EntityType() == "service.instance" && v.AsString() != "1.2" {
					t.Errorf("legacy service.instance attributes %v: want service.version 1.2", d.Attributes().AsRaw())
				}
				if strict && d.EntityType() == "process" && (str(e.ID(), "host.id") != host.ID || str(e.ID(), "process.pid") != fmt.Sprint(pid)) {
					t.Errorf("legacy process id %v: want host.id %s, process.pid %d", e.ID().AsRaw(), host.ID, pid)
				}
			case experimentalmetricmetadata.EventTypeDelete:
				seen["delete"] = appendNew(seen["delete"], e.EntityDeleteDetails().EntityType())
			default:
				if strict {
					t.Errorf("legacy record %v: not an entity event for contrib's decoder", sl.LogRecords().At(i).Attributes().AsRaw())
				}
			}
		}
	})
	return seen
}

// checkSpec checks pid's events against the specification's table (event
// name; entity.type; entity.id, a map of strings; on entity.state
// entity.description, entity.report.interval in seconds, the runs_on
// relationships; on entity.delete entity.delete.reason) and returns the
// entity types seen per event kind.
func checkSpec(t *testing.T, ls []plog.Logs, pid int, host hostinfo.Host, strict bool) map[string][]string {
	t.Helper()
	seen := map[string][]string{}
	var procID map[string]any
	var rels = map[string]map[string]any{} // entity type -> its relationship
	resourcesOf(t, ls, pid, host, strict, func(sl plog.ScopeLogs) {
		for _, lr := range sl.LogRecords().All() {
			a := lr.Attributes()
			typ, id := str(a, "entity.type"), mapOf(a, "entity.id")
			if strict && !allStrings(id) {
				t.Errorf("spec %s: entity.id %v is not a map of strings", lr.EventName(), id)
			}
			switch lr.EventName() {
			case "entity.state":
				seen["state"] = appendNew(seen["state"], typ)
				if v, _ := a.Get("entity.report.interval"); strict && v.Type() != pcommon.ValueTypeInt || v.Int() != 60 {
					t.Errorf("spec state of %s: entity.report.interval %v, want 60 (s)", typ, v.AsRaw())
				}
				desc := mapOf(a, "entity.description")
				if strict && (desc == nil || typ == "service.instance" && desc["service.version"] != "1.2") {
					t.Errorf("spec state of %s: entity.description %v", typ, desc)
				}
				if typ == "process" {
					procID = id
				}
				if r, ok := a.Get("entity.relationships"); ok && r.Type() == pcommon.ValueTypeSlice && r.Slice().Len() == 1 {
					rels[typ] = r.Slice().At(0).Map().AsRaw()
				}
			case "entity.delete":
				seen["delete"] = appendNew(seen["delete"], typ)
				if strict && str(a, "entity.delete.reason") != "terminated" {
					t.Errorf("spec delete of %s: entity.delete.reason %q, want terminated", typ, str(a, "entity.delete.reason"))
				}
			default:
				if strict {
					t.Errorf("record with event name %q: not an entity event", lr.EventName())
				}
			}
		}
	})
	if !strict {
		return seen
	}
	if procID["host.id"] != host.ID || procID["process.pid"] != fmt.Sprint(pid) {
		t.Errorf("spec process entity.id %v: want host.id %s, process.pid %d", procID, host.ID, pid)
	}
	wantRel := func(from, to string, id map[string]any) {
		r := rels[from]
		if r["relationship.type"] != "runs_on" || r["entity.type"] != to || fmt.Sprint(r["entity.id"]) != fmt.Sprint(id) {
			t.Errorf("spec %s relationship %v, want runs_on %s %v", from, r, to, id)
		}
	}
	wantRel("process", "host", map[string]any{"host.id": host.ID})
	wantRel("service.instance", "process", procID)
	return seen
}

func mapOf(m pcommon.Map, k string) map[string]any {
	if v, ok := m.Get(k); ok && v.Type() == pcommon.ValueTypeMap {
		return v.Map().AsRaw()
	}
	return nil
}

func allStrings(m map[string]any) bool {
	for _, v := range m {
		if _, ok := v.(string); !ok {
			return false
		}
	}
	return len(m) > 0
}

func appendNew(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

// readLogs decodes the complete lines of the exporter's file, one OTLP JSON
// logs request each.
func readLogs(t *testing.T, path string) []plog.Logs {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndexByte(data, '\n')
	if i < 0 {
		return nil
	}
	var out []plog.Logs
	var um plog.JSONUnmarshaler
	for n, line := range bytes.Split(data[:i], []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		l, err := um.UnmarshalLogs(line)
		if err != nil {
			t.Fatalf("%s line %d: not OTLP JSON logs: %v", path, n+1, err)
		}
		out = append(out, l)
	}
	return out
}

// waitLogs polls the exporter's file until done holds for what it holds, the
// collector exits, or eventTimeout passes.
func (c *collector) waitLogs(t *testing.T, path, what string, done func([]plog.Logs) bool) []plog.Logs {
	t.Helper()
	var ls []plog.Logs
	testenv.EventuallyWithin(t, eventTimeout, what+" in "+path, func() bool {
		ls = readLogs(t, path)
		if done(ls) {
			return true
		}
		if c.Exited() {
			t.Fatalf("waiting for %s: collector exited (%v)", what, c.Err())
		}
		return false
	})
	return ls
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package node_test runs real Node.js releases traced by the real dd-trace
// (make node-deps) and reads their nodejs_v1_dev thread contexts.
package node_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/testutil/nodepub"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(testenv.LongLived...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// acfEnv turns AsyncContextFrame on where it is not the default (Node 22).
func acfEnv(major int) []string {
	if major == 22 {
		return []string{"NODE_OPTIONS=--experimental-async-context-frame"}
	}
	return nil
}

// TestShapes: on the main thread and in a worker, the span active in each
// shape of async code (sync, after await, in a timer, a promise
// continuation, setImmediate, nested spans, after they end, none at all)
// is the one read, with dd-trace's attributes; no other thread has one.
func TestShapes(t *testing.T) {
	testenv.RequireRoot(t)
	for _, major := range nodepub.Majors {
		t.Run(fmt.Sprintf("node%d", major), func(t *testing.T) {
			p := nodepub.Start(t, nodepub.Node(t, major), acfEnv(major), "shapes")
			tl := nodepub.Context(t, p.PID)
			if tl.SchemaVersion != nodectx.Schema {
				t.Fatalf("schema %q, want %q", tl.SchemaVersion, nodectx.Schema)
			}
			steps := 0
			for {
				r, ok := p.NextReady(t)
				if !ok {
					break
				}
				checkStep(t, p.PID, tl, r)
				p.Release(t, r.Name)
				steps++
			}
			if steps != 18 {
				t.Errorf("%d steps, want 18 (9 shapes on 2 threads)", steps)
			}
		})
	}
}

func checkStep(t *testing.T, pid int, tl processctx.ThreadLocal, r nodepub.Ready) {
	t.Helper()
	var with []threadread.Thread
	for _, th := range nodepub.Settled(t, pid, tl) {
		if th.Record != nil {
			with = append(with, th)
		} else if !threadread.NoContext(th.Reason) && th.Reason != threadread.ReasonExited {
			t.Errorf("%s: thread %d: %s (%v)", r.Name, th.TID, th.Reason, th.Err)
		}
	}
	if r.SpanID == "" {
		if len(with) != 0 {
			t.Errorf("%s: no span active, yet thread %d has %s", r.Name, with[0].TID, with[0].Record.SpanID)
		}
		return
	}
	if len(with) != 1 {
		t.Fatalf("%s: %d threads with a record, want 1", r.Name, len(with))
	}
	th := with[0]
	if got := th.Record.TraceID.String() + " " + th.Record.SpanID.String(); got != r.TraceID+" "+r.SpanID {
		t.Errorf("%s: read %s, want %s %s", r.Name, got, r.TraceID, r.SpanID)
	}
	if (r.Thread == "main") != (th.TID == pid) {
		t.Errorf("%s: the record is on thread %d (pid %d)", r.Name, th.TID, pid)
	}
	wantName := "Main Event Loop"
	if r.Thread == "worker" {
		wantName = "Worker #1 Event Loop"
	}
	if got := th.Attributes["datadog.thread_name"]; got != wantName {
		t.Errorf("%s: datadog.thread_name %q, want %q (attributes %v)", r.Name, got, wantName, th.Attributes)
	}
	if th.Attributes["datadog.local_root_span_id"] == "" {
		t.Errorf("%s: no datadog.local_root_span_id (attributes %v)", r.Name, th.Attributes)
	}
}

// TestWithoutAsyncContextFrame: Node 20 (no AsyncContextFrame at all) and
// Node 22 without the flag: dd-trace declines to write thread contexts and
// publishes no schema, and the reader says so.
func TestWithoutAsyncContextFrame(t *testing.T) {
	testenv.RequireRoot(t)
	for _, major := range []int{20, 22} {
		t.Run(fmt.Sprintf("node%d", major), func(t *testing.T) {
			p := nodepub.Start(t, nodepub.Node(t, major), nil, "shapes")
			r, _ := p.NextReady(t)
			if r.Name != "main-none" {
				t.Fatalf("first step %q", r.Name)
			}
			p.Release(t, r.Name)
			r, _ = p.NextReady(t) // main-sync: a span is active
			tl := nodepub.Context(t, p.PID)
			_, err := registry.ForVersion(tl.SchemaVersion)
			if !errors.Is(err, schema.ErrNoSchema) {
				t.Fatalf("schema %q: ForVersion = %v, want ErrNoSchema", tl.SchemaVersion, err)
			}
			if !strings.Contains(err.Error(), "no thread contexts published") {
				t.Errorf("message %q", err)
			}
			p.Release(t, r.Name)
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/nodepub"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestThreadsNode: otelctx threads shows a Node.js service's current span
// (dd-trace, nodejs_v1_dev) in both modes, and says why a Node 20 service
// has none.
func TestThreadsNode(t *testing.T) {
	testenv.RequireRoot(t)
	p := nodepub.Start(t, nodepub.Node(t, 24), nil, "shapes")
	r, _ := p.NextReady(t) // main-none
	p.Release(t, r.Name)
	if r, _ = p.NextReady(t); r.Name != "main-sync" {
		t.Fatalf("step %q", r.Name)
	}
	nodepub.Context(t, p.PID)
	pid := strconv.Itoa(p.PID)
	out := otelctx(t, "threads", pid)
	if out.code != 0 || !strings.Contains(out.stdout, pid+"  otep4947  "+r.TraceID+"  "+r.SpanID) ||
		!strings.Contains(out.stdout, "datadog.thread_name=Main Event Loop") {
		t.Errorf("ptrace (exit %d), want %s %s:\n%s%s", out.code, r.TraceID, r.SpanID, out.stdout, out.stderr)
	}
	t.Run("ebpf", func(t *testing.T) {
		samplertest.Require(t)
		sampleUntil(t, "the main thread's span "+r.SpanID+" sampled", func() bool {
			out := otelctx(t, "threads", "--mode", "ebpf", "--duration", "500ms", "--frequency", "997", "--json", pid)
			if out.code != 0 {
				t.Fatalf("ebpf: exit %d\n%s%s", out.code, out.stdout, out.stderr)
			}
			return strings.Contains(out.stdout, `"span_id": "`+r.SpanID+`"`) || strings.Contains(out.stdout, `"span_id":"`+r.SpanID+`"`)
		})
	})
	p.Release(t, r.Name)

	t.Run("node20", func(t *testing.T) {
		p := nodepub.Start(t, nodepub.Node(t, 20), nil, "shapes")
		p.NextReady(t)
		nodepub.Context(t, p.PID)
		out := otelctx(t, "threads", strconv.Itoa(p.PID))
		if out.code != 1 || !strings.Contains(out.stderr, "no threadlocal.schema_version") ||
			!strings.Contains(out.stderr, "DD_TRACE_OTEL_CTX_ENABLED=true on Node >= 22 with AsyncContextFrame") {
			t.Errorf("exit %d, stderr %q", out.code, out.stderr)
		}
	})
}

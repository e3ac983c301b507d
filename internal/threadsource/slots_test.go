// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestDDThreadsPtrace: the ptrace source puts the
// DD_OTEL_CTX records of a real writer into the catalog (W3C ids, source
// dd_otel_ctx) for a process that publishes no process context, finds it
// without a context, leaves out the threads that share a slot,
// follows updates, and updates it with the service once a context is
// published.
func TestDDThreadsPtrace(t *testing.T) {
	testenv.RequireRoot(t)
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 16, Threads: 3})
	shared, _ := w.Collide(0)
	w.Set(0, 0, 0xaaa, 0xa0)
	w.Set(shared.Index, 0, 0xbbb, 0xb0)
	w.Set(1, 0x0102030405060708, 0x090a0b0c0d0e0f10, 0x1112131415161718)
	w.Busy(1) // running: the DD read does not stop threads
	w.Set(2, 0, 0xccc, 0xc0)
	alone, busy := w.Threads[2].TID, w.Threads[1].TID

	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	cfg := fastConfig(w.PID)
	cfg.ThreadSampler = SamplerPtrace
	cfg.ThreadContext.Interval = 100 * time.Millisecond
	cfg.DD = ddscan.SearchAll // the writer is not called java
	evs, _, cat := startSource(t, cfg, tel)

	eventually(t, "the DD records in the catalog", func() bool {
		_, _, ok1 := cat.Thread(w.PID, busy)
		_, _, ok2 := cat.Thread(w.PID, alone)
		return ok1 && ok2
	})
	rec, _, _ := cat.Thread(w.PID, busy)
	if rec.Source != publisher.SourceDD || rec.Record.TraceID.String() != "0102030405060708090a0b0c0d0e0f10" ||
		rec.Record.SpanID.String() != "1112131415161718" || rec.Record.TraceFlags != 0 || len(rec.Attributes) != 0 {
		t.Fatalf("record %+v", rec)
	}
	// Joined like any record: by time, through the catalog's history.
	if r, _, ok := cat.ThreadAt(w.PID, alone, time.Now()); !ok || r == nil || r.Record.SpanID.String() != "00000000000000c0" {
		t.Fatalf("ThreadAt: %+v %v", r, ok)
	}
	for _, tid := range []int{w.Threads[0].TID, shared.TID} {
		if r, _, ok := cat.Thread(w.PID, tid); ok {
			t.Errorf("tid %d shares its slot, yet the catalog has %+v", tid, r)
		}
	}
	p, ok := cat.Process(w.PID)
	if !ok || p.HasContext() || p.Buffer == nil || p.Buffer.Addr != w.Buf {
		t.Fatalf("catalog process %+v", p)
	}
	// Found without a context: the receiver announces a process entity
	// only (entity.go; its tests check the entities of a context).
	if found := evs.of(w.PID, publisher.Found); len(found) != 1 || found[0].Process.HasContext() {
		t.Fatalf("Found events %+v", found)
	}

	// Updates and clears follow.
	w.Set(1, 0, 0xddd, 0xd0)
	eventually(t, "the updated record", func() bool {
		r, _, ok := cat.Thread(w.PID, busy)
		return ok && r.Record.SpanID.String() == "00000000000000d0"
	})
	w.Clear(2)
	eventually(t, "the cleared thread to leave the catalog", func() bool { _, _, ok := cat.Thread(w.PID, alone); return !ok })

	// A process context published later joins: the service is announced,
	// the DD records stay.
	w.Context("dd-java-svc")
	eventually(t, "an Updated event with the service", func() bool {
		for _, e := range evs.of(w.PID, publisher.Updated) {
			if v, ok := processctx.Lookup(e.Process.Context.Resource.Attributes, "service.name"); ok && v.Str == "dd-java-svc" {
				return true
			}
		}
		return false
	})
	if p, _ := cat.Process(w.PID); !p.HasContext() || p.Buffer == nil {
		t.Fatalf("process after the context: %+v", p)
	}
	w.Set(1, 0, 0xeee, 0xe0)
	eventually(t, "a record after the context", func() bool {
		r, _, ok := cat.Thread(w.PID, busy)
		return ok && r.Record.SpanID.String() == "00000000000000e0" && r.Source == publisher.SourceDD
	})

	if n := telemetrytest.Sum(tel, "otelcol_processctx_dd_slots_refused", "reason", "collision"); n == 0 {
		t.Error("collisions not counted")
	}
	if telemetrytest.Sum(tel, "otelcol_processctx_threads_read", "reason", "") == 0 {
		t.Error("threads_read not counted")
	}
	if telemetrytest.Sum(tel, "otelcol_processctx_thread_snapshots", "reason", "") != 0 {
		t.Error("threads were stopped for a process without OTEP 4947 thread context")
	}

	w.Kill()
	eventually(t, "the process to leave the live processes", func() bool {
		_, ok := cat.Process(w.PID)
		return !ok
	})
	if cat.RetainedCount() != 1 || len(cat.Threads(w.PID)) == 0 {
		t.Errorf("the exited process and its threads are not retained: %d processes, %d threads", cat.RetainedCount(), len(cat.Threads(w.PID)))
	}
}

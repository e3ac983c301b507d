// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestDDThreadsInPIDNamespace: a DD writer in its own PID namespace (a
// containerised JVM) takes its slots by the TIDs of that namespace; the
// receiver, on either path, must put each worker's own context under the
// worker's TID here (the catalog's key), and nothing else. The capacity is
// one at which every thread's slot differs between its two TIDs, so a slot
// read by our TID is another thread's or empty.
func TestDDThreadsInPIDNamespace(t *testing.T) {
	for _, mode := range []string{SamplerPtrace, SamplerEBPF} {
		t.Run(mode, func(t *testing.T) {
			testenv.RequirePIDNamespace(t)
			if mode == SamplerEBPF {
				samplertest.Require(t)
			}
			w := ddwriter.StartInPIDNamespace(t, ddwriter.Glibc, ddwriter.Options{Threads: 3})
			want := map[int]string{}
			for i, wt := range w.Threads {
				w.Set(i, 0, 0x700+uint64(i), 0x800+uint64(i))
				want[wt.TID] = fmt.Sprintf("%032x/%016x", 0x700+i, 0x800+i)
			}

			tel := componenttest.NewTelemetry()
			t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
			var cfg *testConfig
			if mode == SamplerEBPF {
				cfg = ebpfConfig(w.PID)
			} else {
				cfg = fastConfig(w.PID)
				cfg.ThreadSampler = SamplerPtrace
				cfg.ThreadContext.Interval = 100 * time.Millisecond
			}
			cfg.DD = ddscan.SearchAll // the writer is not called java
			_, wr, cat := startSource(t, cfg, tel)
			if mode == SamplerEBPF {
				eventually(t, "the writer tracked by the sampler", func() bool { return samplerOf(t, wr).isTracked(w.PID) })
			}
			for i := range w.Threads {
				w.Busy(i) // the kernel reads a thread's slot while it runs
			}
			eventually(t, "a record for every worker", func() bool {
				for tid := range want {
					if _, _, ok := cat.Thread(w.PID, tid); !ok {
						return false
					}
				}
				return true
			})
			for i := range w.Threads {
				w.Idle(i)
			}
			for i, wt := range w.Threads {
				h := cat.History(w.PID, wt.TID)
				for _, o := range h {
					if o.Record == nil {
						continue
					}
					r := o.Record
					if got := r.Record.TraceID.String() + "/" + r.Record.SpanID.String(); r.Source != publisher.SourceDD || got != want[wt.TID] {
						t.Fatalf("worker %d (tid %d here, %d in its namespace, capacity %d): catalog has %s (source %s), want %s",
							i, wt.TID, wt.NSTID, w.Capacity, got, r.Source, want[wt.TID])
					}
				}
				t.Logf("worker %d (tid %d, namespace tid %d): %d observations, all its own", i, wt.TID, wt.NSTID, len(h))
			}
			if r, _, ok := cat.Thread(w.PID, w.PID); ok {
				t.Errorf("the main thread never set a context, yet the catalog has %+v", r)
			}
			if n := telemetrytest.Sum(tel, "otelcol_processctx_dd_slots_refused", "reason", ddSlotCollision); n != 0 {
				t.Errorf("%d collisions counted: the namespace TIDs share no slot", n)
			}
		})
	}
}

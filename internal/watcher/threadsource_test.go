// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"
	"os"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/threadsource"
)

// TestThreadSourceChosen: thread_sampler gives the watcher one source of
// the kind it names, whose telemetry says where thread contexts are read
// (thread_context_source 1 for it, 0 for the others), and only the eBPF
// sampler asks for rescans.
func TestThreadSourceChosen(t *testing.T) {
	for _, tc := range []struct {
		sampler, source string
		rescans         bool
	}{
		{ThreadSamplerOff, threadsource.AtNowhere, false},
		{ThreadSamplerPtrace, threadsource.AtPtrace, false},
		{ThreadSamplerEBPF, threadsource.AtOwnTicks, true},
	} {
		t.Run(tc.sampler, func(t *testing.T) {
			switch tc.sampler {
			case ThreadSamplerPtrace:
				testenv.RequireRoot(t)
			case ThreadSamplerEBPF:
				samplertest.Require(t)
			}
			tel := componenttest.NewTelemetry()
			t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
			cfg := fastConfig(os.Getpid())
			cfg.ThreadSampler = tc.sampler
			_, w, _ := startWatcher(t, cfg, tel)
			if got := w.threads.Current(); got != tc.source {
				t.Errorf("source %T reads at %q, want %q", w.threads, got, tc.source)
			}
			if (w.threads.Rescans() != nil) != tc.rescans {
				t.Errorf("source %T: rescans %v, want a channel: %v", w.threads, w.threads.Rescans(), tc.rescans)
			}
			eventually(t, "thread_context_source "+tc.source, func() bool {
				for _, s := range threadsource.Places {
					v, ok := telemetrytest.Gauge(tel, "otelcol_processctx_thread_context_source", "source", s)
					if !ok || (v == 1) != (s == tc.source) {
						return false
					}
				}
				return true
			})
		})
	}
}

// The discovery of a DD_OTEL_CTX buffer (thread_sampler not off,
// dd_otel_ctx.processes: all) is counted: dd_searches{result=found} and
// the dd_buffers gauge.
func TestDDDiscoveryTelemetry(t *testing.T) {
	testenv.RequireRoot(t)
	wr := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 16, Threads: 1})
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	cfg := fastConfig(wr.PID)
	cfg.ThreadSampler = ThreadSamplerPtrace
	cfg.DDOtelCtx.Processes = DDProcessesAll // the writer is not called java
	startWatcher(t, cfg, tel)
	eventually(t, "the buffer found and tracked", func() bool {
		v, ok := telemetrytest.Gauge(tel, "otelcol_processctx_dd_buffers", "", "")
		return telemetrytest.Sum(tel, "otelcol_processctx_dd_searches", "result", "found") > 0 && ok && v == 1
	})
}

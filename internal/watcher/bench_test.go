// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// BenchmarkWatcherPollRound: one poll round of the watcher over 8
// publishers, its telemetry (discovery, catalog, thread_context_source)
// recorded on the SDK: what each round, one per prctl event at worst,
// costs the poll goroutine beyond the scanner's reads.
func BenchmarkWatcherPollRound(b *testing.B) {
	var pids []int
	for range 8 {
		p := testpub.Start(b, testpub.Glibc)
		p.Set("service.name", "bench")
		p.Publish()
		pids = append(pids, p.PID)
	}
	tel := componenttest.NewTelemetry()
	b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	cfg := fastConfig(pids...)
	w, err := New(Settings{Telemetry: testTelemetry(b, tel)}, *cfg)
	if err != nil {
		b.Fatal(err)
	}
	// The round alone, on this goroutine: no poll goroutine (Start).
	sc, err := scan.New(scan.Options{Limits: cfg.limits(), MaxProcesses: cfg.Limits.MaxProcesses, Filter: cfg.filter()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sc.Close() })
	w.scanner, w.threads = sc, benchSource()
	ctx := context.Background()
	w.poll(ctx, roundDiscover)
	if n := w.catalog.Occupancy().Processes; n != len(pids) {
		b.Fatalf("%d processes in the catalog, want %d", n, len(pids))
	}
	for b.Loop() {
		w.poll(ctx, roundPoll)
	}
}

// BenchmarkRoundTelemetry: what a round records, alone (no reads): the
// discovery counters and gauges (a failure of each reason), the catalog's
// occupancy, and where thread contexts are read.
func BenchmarkRoundTelemetry(b *testing.B) {
	tel := componenttest.NewTelemetry()
	b.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	w, err := New(Settings{Telemetry: testTelemetry(b, tel)}, *fastConfig(1 << 22))
	if err != nil {
		b.Fatal(err)
	}
	st := scan.Stats{ProcessesScanned: 3, Polled: 8, BufferSearches: 2, BuffersFound: 1, ContextsTracked: 8}
	for r := range st.Failures {
		st.Failures[r] = 1
	}
	ctx := context.Background()
	for b.Loop() {
		w.tel.recordScan(ctx, st)
		benchRecordSource(ctx, w)
		w.ctel.record(ctx, w.catalog.Occupancy(), w.catalog.EnvStats(), NewDefaultConfig().Limits, 1<<20)
	}
}

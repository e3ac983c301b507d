// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LongLived...) }

// eventually waits for cond (testenv.Eventually).
var eventually = testenv.Eventually

// testConfig is what a test chooses of a source and of the discovery that
// feeds it: the watcher's configuration, in small.
type testConfig struct {
	ThreadSampler string
	ThreadContext Config
	// Interval is the discovery rounds' period and the eBPF full sync's.
	Interval time.Duration
	// DD is which processes discovery searches for a DD_OTEL_CTX buffer.
	DD   ddscan.Mode
	PIDs []int
}

func fastConfig(pids ...int) *testConfig {
	return &testConfig{ThreadSampler: SamplerOff, ThreadContext: DefaultConfig(), Interval: 20 * time.Millisecond, DD: ddscan.SearchNone, PIDs: pids}
}

// rounds records the events of the rounds a source was handed.
type rounds struct {
	mu     sync.Mutex
	events []publisher.Event
}

func (r *rounds) add(events []publisher.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, events...)
}

// of is the recorded events of kind for pid.
func (r *rounds) of(pid int, kind publisher.EventKind) []publisher.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []publisher.Event
	for _, e := range r.events {
		if e.Process.ID.PID == pid && e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// running is a source fed as the watcher feeds one: discovery rounds over
// the test's PIDs applied to a catalog, then handed to the source, and the
// source's rescans polled.
type running struct {
	Source
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// Shutdown stops the source's goroutines and the rounds.
func (r *running) Shutdown(context.Context) error {
	r.once.Do(func() {
		r.cancel()
		r.wg.Wait()
	})
	return nil
}

// startSource starts the source of cfg (its telemetry to tel if not nil),
// stopped when the test ends.
func startSource(t *testing.T, cfg *testConfig, tel *componenttest.Telemetry) (*rounds, *running, *catalog.Catalog) {
	t.Helper()
	set := Settings{Logger: zap.NewNop()}
	if tel != nil {
		set.Telemetry = testTelemetry(t, tel)
	}
	rec, r, cat, err := run(t, set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rec, r, cat
}

// startObserved starts the source of cfg with its Info logs kept, and
// returns Start's error (New's).
func startObserved(t *testing.T, cfg *testConfig) (*running, *observer.ObservedLogs, error) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	_, r, _, err := run(t, Settings{Logger: zap.New(core)}, cfg)
	return r, logs, err
}

// startLogged starts and stops the source of cfg and returns its Info logs
// and New's error.
func startLogged(t *testing.T, cfg *testConfig) (*observer.ObservedLogs, error) {
	t.Helper()
	r, logs, err := startObserved(t, cfg)
	if err == nil {
		err = r.Shutdown(context.Background())
	}
	return logs, err
}

func run(t *testing.T, set Settings, cfg *testConfig) (*rounds, *running, *catalog.Catalog, error) {
	t.Helper()
	set.Catalog = catalog.New()
	src, err := New(set, Options{
		Sampler: cfg.ThreadSampler, Config: cfg.ThreadContext, Limits: processctx.DefaultLimits(),
		MaxProcesses: 16384, PrctlWindow: 250 * time.Millisecond, SyncEvery: cfg.Interval,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	sc, err := scan.New(scan.Options{
		Limits: processctx.DefaultLimits(), MaxProcesses: 16384, Buffers: []scan.BufferSearch{ddscan.New(cfg.DD)},
		Filter:     func(pid int, _ string) bool { return slices.Contains(cfg.PIDs, pid) },
		RecheckMin: cfg.Interval, RecheckMax: cfg.Interval, MinRescanInterval: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, rec := &running{Source: src, cancel: cancel}, &rounds{}
	src.Start(ctx, &r.wg)
	apply := func(events []publisher.Event, _ scan.Stats, err error) {
		if err != nil {
			t.Errorf("discovery: %v", err)
			return
		}
		set.Catalog.Apply(events)
		if len(events) > 0 {
			src.Applied(events)
		}
		rec.add(events)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		tick := time.NewTicker(cfg.Interval)
		defer tick.Stop()
		apply(sc.Scan())
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				apply(sc.Scan())
			case pid := <-src.Rescans():
				apply(sc.PollPIDs(pid))
			}
		}
	}()
	t.Cleanup(func() {
		_ = r.Shutdown(context.Background())
		_ = sc.Close()
	})
	return rec, r, set.Catalog, nil
}

// samplerOf is the eBPF source of r.
func samplerOf(t testing.TB, r *running) *EBPF {
	t.Helper()
	s, ok := r.Source.(*EBPF)
	if !ok {
		t.Fatalf("the source is a %T, not the eBPF sampler", r.Source)
	}
	return s
}

// threadLines are the log lines about the thread sampler.
func threadLines(logs *observer.ObservedLogs) []string {
	var out []string
	for _, e := range logs.FilterMessageSnippet("thread contexts: ").All() {
		out = append(out, e.Message)
	}
	return out
}

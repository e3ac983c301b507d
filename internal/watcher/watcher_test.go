// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LongLived...) }

// eventually waits for cond (testenv.Eventually).
var eventually = testenv.Eventually

func fastConfig(pids ...int) *Config {
	cfg := NewDefaultConfig()
	cfg.CollectionInterval = 20 * time.Millisecond
	cfg.DiscoveryInterval = 20 * time.Millisecond
	cfg.RecheckInterval = 20 * time.Millisecond
	cfg.Include.PIDs = pids // keep the host's other processes out of the test
	// Thread sampling only where a test asks for it: auto would load the
	// eBPF sampler (or ptrace the test's children) in every test.
	cfg.ThreadSampler = ThreadSamplerOff
	return cfg
}

// rounds records the events of the rounds a subscriber was given.
type rounds struct {
	mu     sync.Mutex
	events []publisher.Event
	n      int
}

func (r *rounds) add(rd Round) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, rd.Events...)
	r.n++
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

func (r *rounds) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// startWatcher starts a watcher with cfg (its telemetry to tel if not nil)
// that is shut down when the test ends, subscribed to by a recorder.
func startWatcher(t *testing.T, cfg *Config, tel *componenttest.Telemetry) (*rounds, *Watcher, *catalog.Catalog) {
	t.Helper()
	set := Settings{Logger: zap.NewNop()}
	if tel != nil {
		set.Telemetry = testTelemetry(t, tel)
	}
	w, err := New(set, *cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Subscribed before Start: the first round's Found events are recorded
	// however soon it comes.
	rec := &rounds{}
	t.Cleanup(w.Subscribe(rec.add))
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return rec, w, w.Catalog()
}

// Start once, Shutdown any number of times (also without Start); a second
// Start fails rather than leak a second scanner, and so does a Start after
// Shutdown.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	cfg := fastConfig(1 << 22)
	fresh, err := New(Settings{}, *cfg)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Catalog() == nil {
		t.Fatal("no catalog before Start")
	}
	for range 2 {
		if err := fresh.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := fresh.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "shut down") {
		t.Fatalf("Start after Shutdown: %v", err)
	}
	w, err := New(Settings{}, *cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err == nil {
		t.Fatal("a second Start must fail")
	}
	for range 2 {
		if err := w.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// Every round reaches every subscriber, on time and in order; one that
// unsubscribed gets none after unsubscribe returns; a subscriber that
// comes after the publisher was found still sees it among the tracked
// processes of its first round.
func TestSubscribe(t *testing.T) {
	t.Parallel()
	pub := testpub.Start(t, testpub.Glibc)
	pub.Set("service.name", "subscribed")
	pub.Publish()
	rec, w, cat := startWatcher(t, fastConfig(pub.PID), nil)
	eventually(t, "the publisher found", func() bool { return len(rec.of(pub.PID, publisher.Found)) == 1 })
	if _, ok := cat.Process(pub.PID); !ok {
		t.Fatal("a Found event before the catalog has the process")
	}

	var mu sync.Mutex
	var late []time.Time
	var sawPub []bool
	unsubscribe := w.Subscribe(func(r Round) {
		seen := false
		r.Processes(func(p *publisher.Process) { seen = seen || p.ID.PID == pub.PID })
		mu.Lock()
		late, sawPub = append(late, r.Time), append(sawPub, seen)
		mu.Unlock()
	})
	eventually(t, "three rounds for the late subscriber", func() bool { mu.Lock(); defer mu.Unlock(); return len(late) >= 3 })
	unsubscribe()
	unsubscribe() // idempotent
	mu.Lock()
	n := len(late)
	if !sawPub[0] {
		t.Error("the late subscriber's first round does not list the tracked publisher")
	}
	if !slices.IsSortedFunc(late, func(a, b time.Time) int { return a.Compare(b) }) {
		t.Errorf("rounds out of order: %v", late)
	}
	mu.Unlock()
	before := rec.count()
	eventually(t, "more rounds for the first subscriber", func() bool { return rec.count() >= before+3 })
	mu.Lock()
	defer mu.Unlock()
	if len(late) != n {
		t.Errorf("%d rounds after unsubscribe", len(late)-n)
	}
}

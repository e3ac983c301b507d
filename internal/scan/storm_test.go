// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// TestNamedPollPaced: a tracked publisher named by PollPIDs (a prctl event)
// again and again, its stamp moving each time, is polled at most once per
// MinRescanInterval; the polls in between are deferred, not lost: once the
// interval has passed, a PollPIDs naming nobody reads the last change.
func TestNamedPollPaced(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	f := newFixture(t, scan.Options{MinRescanInterval: time.Second, Now: func() time.Time { return now }})
	p := testpub.Start(t, testpub.Glibc)
	p.Set("service.name", "v0")
	p.Publish()
	f.own(p.PID)
	f.waitEvent(publisher.Found, p.PID)

	pollPIDs := func(pids ...int) ([]publisher.Event, scan.Stats) {
		t.Helper()
		evs, st, err := f.s.PollPIDs(pids...)
		if err != nil {
			t.Fatal(err)
		}
		return evs, st
	}
	if _, st := pollPIDs(p.PID); st.Polled != 1 {
		t.Fatalf("first named poll: %d polls, want 1", st.Polled)
	}
	polled := 0
	for _, v := range []string{"v1", "v2", "v3"} {
		p.Set("service.name", v)
		p.Publish()
		evs, st := pollPIDs(p.PID)
		polled += st.Polled
		if len(evs) != 0 {
			t.Fatalf("a named poll within the interval produced %v", evs)
		}
	}
	if polled != 0 {
		t.Fatalf("%d polls of 3 named within MinRescanInterval, want 0", polled)
	}
	at, ok := f.s.NextDeferred()
	if want := now.Add(time.Second); !ok || !at.Equal(want) {
		t.Fatalf("NextDeferred = %v, %v; want %v", at, ok, want)
	}
	if _, st := pollPIDs(); st.Polled != 0 {
		t.Fatalf("before the interval's end: %d polls, want 0", st.Polled)
	}

	now = at
	evs, st := pollPIDs()
	if st.Polled != 1 {
		t.Fatalf("deferred poll: %d polls, want 1", st.Polled)
	}
	e := findEvent(evs, publisher.Updated, p.PID)
	if e == nil {
		t.Fatalf("deferred poll: no update in %v", evs)
	}
	if v := attr(e.Process.Context.Resource.Attributes, "service.name"); v.Str != "v3" {
		t.Fatalf("deferred poll read service.name %q, want the last change v3", v.Str)
	}
	if _, ok := f.s.NextDeferred(); ok {
		t.Fatal("still a poll deferred after it was made")
	}
}

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

// TestNamedPollRoundBudget: a poll a prctl event asks for (PollPIDs) is
// charged to the round budget as a round's poll is: one that costs more
// than the publisher's share quarantines it (reads_failed{reason=
// round_budget}, its result dropped), and a quarantined publisher is not
// read by named polls, nor by rounds, until its quarantine is over; then
// both read it again.
func TestNamedPollRoundBudget(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	f := newFixture(t, scan.Options{MinRescanInterval: time.Second, Now: func() time.Time { return now }})
	p := testpub.Start(t, testpub.Glibc)
	p.Set("service.name", "v0")
	p.Publish()
	f.own(p.PID)
	f.waitEvent(publisher.Found, p.PID)

	pollPIDs := func(pids ...int) ([]publisher.Event, scan.Stats) {
		t.Helper()
		now = now.Add(2 * time.Second) // past MinRescanInterval: never paced
		evs, st, err := f.s.PollPIDs(pids...)
		if err != nil {
			t.Fatal(err)
		}
		return evs, st
	}

	restore := scan.SlowPolls()
	p.Set("service.name", "v1")
	p.Publish()
	evs, st := pollPIDs(p.PID)
	restore()
	if st.Polled != 1 || st.Failures[scan.ReasonRoundBudget] != 1 {
		t.Fatalf("a named poll over its share: %d polls, failures %v; want 1 poll, 1 round_budget", st.Polled, failures(st))
	}
	if e := findEvent(evs, publisher.Updated, p.PID); e != nil {
		t.Fatalf("the result of a poll over its share was applied: %v", describe(evs))
	}

	p.Set("service.name", "v2")
	p.Publish()
	if evs, st := pollPIDs(p.PID); st.Polled != 0 || len(evs) != 0 || len(failures(st)) != 0 {
		t.Fatalf("named poll of a publisher quarantined by the round budget: %d polls, events %s, failures %v; want none",
			st.Polled, describe(evs), failures(st))
	}
	if evs, st := f.mine("Poll", f.s.Poll); st.Polled != 0 || len(evs) != 0 {
		t.Fatalf("round while it is quarantined: %d polls, events %s; want none", st.Polled, describe(evs))
	}

	f.s.ForgetOverruns()
	evs, st = pollPIDs(p.PID)
	e := findEvent(evs, publisher.Updated, p.PID)
	if st.Polled != 1 || e == nil {
		t.Fatalf("named poll after the quarantine: %d polls, events %s; want 1 poll, an update", st.Polled, describe(evs))
	}
	if v := attr(e.Process.Context.Resource.Attributes, "service.name"); v.Str != "v2" {
		t.Fatalf("read service.name %q, want v2", v.Str)
	}
}

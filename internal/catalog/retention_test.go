// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/publisher"
)

// procAt is a process created at created (its start ticks follow).
func procAt(pid int, created time.Time) *publisher.Process {
	return &publisher.Process{ID: publisher.ProcessID{PID: pid, StartTicks: uint64(created.UnixNano() / 1e7)}, CreationTime: created}
}

// newClocked is a catalog whose clock reads *now.
func newClocked(now *time.Time) *Catalog {
	c := New()
	c.now = func() time.Time { return *now }
	return c
}

// foundAndLost has c find a process (pid, created an hour before now) and
// then lose it.
func foundAndLost(c *Catalog, pid int, now time.Time) *publisher.Process {
	p := procAt(pid, now.Add(-time.Hour))
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
	c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: p}})
	return p
}

// replaced has PID 7 held by a process (created an hour before *now, with
// an exact observation of thread 8 a second before *now) that exits at
// *now, and 5 s later by a successor; *now moves to the successor's start.
func replaced(t *testing.T, c *Catalog, now *time.Time) (old *publisher.Process, exit time.Time, successor *publisher.Process) {
	t.Helper()
	old = procAt(7, now.Add(-time.Hour))
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: old}})
	if !c.ObserveFor(old.ID, 8, now.Add(-time.Second), rec(7, 8, 1, *now), true) {
		t.Fatal("observation refused")
	}
	exit = *now
	c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: old}})
	*now = now.Add(5 * time.Second)
	successor = procAt(7, *now)
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: successor}})
	return old, exit, successor
}

// An exited process stays joinable for its samples taken while it lived,
// for the retention; a successor holding the PID gets only samples taken
// after it was created; samples taken after the exit are nobody's.
func TestProcessAtRetention(t *testing.T) {
	now := time.Unix(10_000, 0)
	c := newClocked(&now)
	c.SetRetention(time.Minute, 10)
	old, exit, successor := replaced(t, c, &now)

	ns := func(t time.Time) int64 { return t.UnixNano() }
	for _, tc := range []struct {
		name string
		at   int64
		want *publisher.Process
		how  Lookup
	}{
		{"while the old one lived", ns(exit.Add(-2 * time.Second)), old, Found},
		{"after the old one exited", ns(exit.Add(time.Second)), nil, OtherHolder},
		{"the successor", ns(now.Add(time.Second)), successor, Found},
		{"before both", ns(old.CreationTime.Add(-time.Second)), nil, OtherHolder},
		{"unknown time: the live one", 0, successor, Found},
	} {
		if p, how := c.ProcessAt(7, tc.at); p != tc.want || how != tc.how {
			t.Errorf("%s: ProcessAt = %v %v, want %v %v", tc.name, p, how, tc.want, tc.how)
		}
	}
	if _, how := c.ProcessAt(8, ns(now)); how != NoProcess {
		t.Errorf("unknown PID: %v", how)
	}
	if runs := c.AppendRuns(nil, old.ID, 8, 0, ns(now)); len(runs) != 1 || !runs[0].FirstExact {
		t.Errorf("the exited process's history: %+v", runs)
	}
	if runs := c.AppendRuns(nil, successor.ID, 8, 0, ns(now)); len(runs) != 0 {
		t.Errorf("the successor shows its predecessor's history: %+v", runs)
	}
	// Past the retention both the process and its threads go.
	now = exit.Add(time.Minute + time.Second)
	c.Apply(nil)
	if p, _ := c.ProcessAt(7, ns(exit.Add(-2*time.Second))); p != nil || c.RetainedCount() != 0 || c.ThreadCount() != 0 {
		t.Errorf("retained past the retention: %v, %d processes, %d threads", p, c.RetainedCount(), c.ThreadCount())
	}
}

// The number of exited processes kept is bounded: the first to exit goes.
func TestRetentionBounded(t *testing.T) {
	now := time.Unix(10_000, 0)
	c := newClocked(&now)
	c.SetRetention(time.Hour, 3)
	for pid := 1; pid <= 5; pid++ {
		p := procAt(pid, now.Add(-time.Hour))
		c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
		c.ObserveFor(p.ID, pid, now, rec(pid, pid, 1, now), false)
		now = now.Add(time.Second)
		c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: p}})
	}
	if c.RetainedCount() != 3 || c.ThreadCount() != 3 {
		t.Fatalf("%d retained, %d threads, want 3 and 3", c.RetainedCount(), c.ThreadCount())
	}
	for pid, want := range map[int]bool{1: false, 2: false, 3: true, 5: true} {
		if _, how := c.ProcessAt(pid, now.Add(-time.Minute).UnixNano()); (how == Found) != want {
			t.Errorf("pid %d: %v, kept want %v", pid, how, want)
		}
	}
}

// A run's exactness is that of its first and last observations.
func TestExactObservations(t *testing.T) {
	c := New()
	p := procAt(7, time.Unix(0, 0))
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
	t0 := time.Unix(100, 0)
	a := rec(7, 8, 1, t0)
	c.ObserveFor(p.ID, 8, t0, a, true)
	c.ObserveFor(p.ID, 8, t0.Add(time.Millisecond), a, false)
	c.ObserveFor(p.ID, 8, t0.Add(2*time.Millisecond), rec(7, 8, 2, t0), false)
	c.ObserveFor(p.ID, 8, t0.Add(3*time.Millisecond), rec(7, 8, 2, t0), true)
	runs := c.AppendRuns(nil, p.ID, 8, 0, t0.Add(time.Second).UnixNano())
	if len(runs) != 2 || !runs[0].FirstExact || runs[0].LastExact || runs[1].FirstExact || !runs[1].LastExact {
		t.Errorf("runs %+v", runs)
	}
}

// A process lost and found again with the same identity (it unpublished
// and published again) is live: the expiry of its retired copy leaves its
// threads alone.
func TestFoundAgainAfterLost(t *testing.T) {
	now := time.Unix(10_000, 0)
	c := newClocked(&now)
	p := foundAndLost(c, 7, now)
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
	if !c.ObserveFor(p.ID, 8, now, rec(7, 8, 1, now), false) {
		t.Fatal("observation of the live process refused")
	}
	if c.RetainedCount() != 0 {
		t.Errorf("%d retained, want 0: the process is live again", c.RetainedCount())
	}
	now = now.Add(2 * DefaultRetention)
	c.Apply(nil)
	if _, _, ok := c.Thread(7, 8); !ok {
		t.Error("the live process's thread was forgotten with its retired copy")
	}
}

// Observations in flight when the exit is noticed (taken before it) are
// kept; later ones are refused.
func TestObserveAfterLost(t *testing.T) {
	now := time.Unix(10_000, 0)
	c := newClocked(&now)
	p := foundAndLost(c, 7, now)
	if !c.ObserveFor(p.ID, 8, now.Add(-time.Millisecond), rec(7, 8, 1, now), true) {
		t.Error("an observation taken before the exit was noticed was refused")
	}
	if c.ObserveFor(p.ID, 8, now.Add(time.Millisecond), rec(7, 8, 2, now), true) {
		t.Error("an observation taken after the exit was noticed was kept")
	}
}

// Expiry goes by exit time whatever the order of the PIDs, and a process
// lost, published again and lost again expires from its last exit only;
// the exit queue stays bounded by the processes retained.
func TestExpiryByExitTime(t *testing.T) {
	now := time.Unix(10_000, 0)
	c := newClocked(&now)
	c.SetRetention(10*time.Second, 100)
	for i := range 20 {
		foundAndLost(c, 1000-i, now)
		now = now.Add(time.Second)
	}
	p := foundAndLost(c, 5, now)
	for range 500 {
		c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
		c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: p}})
	}
	if c.RetainedCount() != 11 { // PIDs 990..981 within the retention, and 5
		t.Fatalf("%d retained, want 11", c.RetainedCount())
	}
	if len(c.exitQ) > 2*c.nExited+64 {
		t.Errorf("exit queue of %d entries for %d retained", len(c.exitQ), c.nExited)
	}
	now = now.Add(5 * time.Second)
	c.Apply(nil)
	for pid, want := range map[int]bool{986: false, 990: false, 985: true, 981: true, 5: true} {
		if _, how := c.ProcessAt(pid, now.Add(-time.Hour).UnixNano()); (how == Found) != want {
			t.Errorf("pid %d: %v, kept want %v", pid, how, want)
		}
	}
	now = now.Add(10 * time.Second)
	c.Apply(nil)
	if c.RetainedCount() != 0 || len(c.exitQ) != 0 {
		t.Fatalf("%d retained, %d queued after the retention, want 0", c.RetainedCount(), len(c.exitQ))
	}
}

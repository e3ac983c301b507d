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

// pollUntil runs Poll until an event of kind for pid arrives.
func (f *fixture) pollUntil(kind publisher.EventKind, pid int) *publisher.Event {
	f.t.Helper()
	deadline := time.Now().Add(scanTimeout)
	for {
		evs, _, err := f.s.Poll()
		if err != nil {
			f.t.Fatalf("Poll: %v", err)
		}
		if e := findEvent(evs, kind, pid); e != nil {
			return e
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("Poll: no %v for pid %d after %v", kind, pid, scanTimeout)
		}
	}
}

// A poll round sees updates and exits of known publishers without listing
// /proc, and finds a new publisher only when told to (Rescan).
func TestPollWithoutDiscovery(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		f := newFixture(t, scan.Options{})
		a := testpub.Start(t, libc)
		a.Set("service.name", "a")
		a.Publish()
		f.own(a.PID)
		f.waitEvent(publisher.Found, a.PID)

		a.Set("service.name", "a2")
		a.Publish()
		e := f.pollUntil(publisher.Updated, a.PID)
		if v := attr(e.Process.Context.Resource.Attributes, "service.name"); v.Str != "a2" {
			t.Fatalf("service.name = %q after update", v.Str)
		}

		// A new publisher is invisible to Poll until Rescan names it.
		b := testpub.Start(t, libc)
		b.Set("service.name", "b")
		b.Publish()
		f.own(b.PID)
		for i := 0; i < 3; i++ {
			evs, st, err := f.s.Poll()
			if err != nil {
				t.Fatal(err)
			}
			if findEvent(evs, publisher.Found, b.PID) != nil || st.ProcessesScanned != 0 {
				t.Fatalf("Poll discovered pid %d without Rescan (scanned %d)", b.PID, st.ProcessesScanned)
			}
		}
		f.s.Rescan(b.PID)
		f.pollUntil(publisher.Found, b.PID)

		a.Exit()
		f.pollUntil(publisher.Lost, a.PID)
		if _, ok := f.s.Lookup(a.PID); ok {
			t.Fatalf("pid %d still tracked after Lost", a.PID)
		}
	})
}

// MinRescanInterval limits forced looks among themselves: the first Rescan
// after discovery is taken at once, a second one within the interval is not.
func TestMinRescanInterval(t *testing.T) {
	f := newFixture(t, scan.Options{MinRescanInterval: time.Hour})
	p := testpub.Start(t, testpub.Glibc) // not published yet
	f.own(p.PID)
	if _, st := f.scan(); st.ProcessesScanned != 1 {
		t.Fatalf("discovery scanned %d processes, want 1", st.ProcessesScanned)
	}
	for i, want := range []int{1, 0} {
		f.s.Rescan(p.PID)
		_, st, err := f.s.Poll()
		if err != nil {
			t.Fatal(err)
		}
		if st.ProcessesScanned != want {
			t.Fatalf("forced look %d scanned %d processes, want %d", i+1, st.ProcessesScanned, want)
		}
	}
}

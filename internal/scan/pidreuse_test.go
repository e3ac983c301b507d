// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// TestScannerPIDReuse makes a new process get the PID of a tracked
// publisher that exited, and checks that the old context is never
// attributed to the new process: the old identity is Lost, and the new
// process is Found only if it publishes itself, with its own start time.
//
// Both processes run without ASLR (publisher --no-aslr) and run the same
// commands, so the successor's context, when it has one, sits at the very
// address the scanner cached for its predecessor: reading "the PID" at the
// cached address returns a valid context that belongs to someone else.
func TestScannerPIDReuse(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		exe := testpub.Build(t, libc)
		for _, tc := range []struct {
			name string
			// successor prepares the new process; it returns whether it
			// publishes a discoverable context.
			successor func(q *testpub.Publisher) bool
		}{
			{"idle process", func(q *testpub.Publisher) bool { return false }},
			{"undiscoverable context at the cached address", func(q *testpub.Publisher) bool {
				q.Set("service.name", "impostor")
				q.Do("anon") // unnamed here: valid bytes, but not a published context
				q.Publish()
				return false
			}},
			{"publisher", func(q *testpub.Publisher) bool {
				q.Set("service.name", "new-identity")
				q.Publish()
				return true
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := newFixture(t, scan.Options{})
				old := testpub.StartBinary(t, exe, "--no-aslr")
				pid := old.PID
				f.own(pid)
				old.Set("service.name", "old-identity")
				oldAddr, _ := old.Publish()
				found, _ := f.waitEvent(publisher.Found, pid)
				oldID := found.Process.ID
				old.Exit()
				waitTicksAfter(t, oldID.StartTicks)

				var q *testpub.Publisher
				testpub.ClaimPID(t, pid, func() (int, func()) {
					q = testpub.StartBinary(t, exe, "--no-aslr")
					return q.PID, q.Kill
				})
				publishes := tc.successor(q)
				newID := publisher.ProcessID{PID: pid, StartTicks: startTicks(t, pid)}
				if newID == oldID {
					t.Fatalf("the successor has the old identity %+v", oldID)
				}
				if strings.Contains(tc.name, "cached address") || publishes {
					// The trap is set: valid bytes at the cached address.
					if h := remoteHeader(t, pid, oldAddr); h.PublishedAtNs == found.Process.Context.PublishedAtNs {
						t.Fatal("the successor's stamp equals the old one")
					}
				}

				var all []publisher.Event
				if publishes {
					all, _ = f.scanUntil("Found of the successor", func(evs []publisher.Event, _ scan.Stats) bool {
						return findEvent(evs, publisher.Found, pid) != nil
					})
				} else {
					all, _ = f.scanUntil("Lost of the old identity", func(evs []publisher.Event, _ scan.Stats) bool {
						return findEvent(evs, publisher.Lost, pid) != nil
					})
					for i := 0; i < 3; i++ {
						f.s.Rescan(pid)
						evs, _ := f.scan()
						all = append(all, evs...)
					}
				}
				t.Logf("events: %s", describe(all))

				if len(all) == 0 || all[0].Kind != publisher.Lost || all[0].Process != found.Process {
					t.Fatalf("first event is not the Lost of the old identity: %s", describe(all))
				}
				for _, e := range all[1:] {
					switch {
					case e.Kind == publisher.Updated || e.Kind == publisher.Lost:
						t.Fatalf("%v event after the old identity was lost: %s", e.Kind, describe(all))
					case e.Process.ID == oldID || attr(e.Process.Context.Resource.Attributes, "service.name").Str == "old-identity":
						t.Fatalf("the old context was attributed to the new process: %+v", e.Process)
					}
				}
				if !publishes {
					if len(all) != 1 {
						t.Fatalf("a process without a discoverable context was reported: %s", describe(all))
					}
					if _, ok := f.s.Lookup(pid); ok {
						t.Fatal("the reused PID is tracked")
					}
					return
				}
				if len(all) != 2 || all[1].Kind != publisher.Found {
					t.Fatalf("want Lost then Found: %s", describe(all))
				}
				n := all[1].Process
				if n.ID != newID || attr(n.Context.Resource.Attributes, "service.name").Str != "new-identity" || n.MappingAddr != oldAddr {
					t.Fatalf("successor found as %+v (old mapping %#x)", n, oldAddr)
				}
				if !n.CreationTime.After(found.Process.CreationTime) {
					t.Fatalf("successor created at %v, predecessor at %v", n.CreationTime, found.Process.CreationTime)
				}
			})
		}
	})
}

// waitTicksAfter returns once the clock-tick counter of /proc/PID/stat has
// moved past ticks, so that a process started now has another start time.
func waitTicksAfter(t *testing.T, ticks uint64) {
	t.Helper()
	deadline := time.Now().Add(scanTimeout)
	for {
		b, err := os.ReadFile("/proc/uptime")
		if err != nil {
			t.Fatal(err)
		}
		up, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
		if err != nil {
			t.Fatal(err)
		}
		if uint64(up*100) > ticks+1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("uptime %v s does not pass %d ticks", up, ticks)
		}
	}
}

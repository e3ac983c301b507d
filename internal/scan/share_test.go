// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"syscall"
	"testing"

	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// TestUserShare: one user (nobody) starts as many publishers as there are
// tracked-process slots, before anyone else: it gets half of them, the rest
// counted as user_share; a publisher of another user (root) started
// afterwards is tracked.
func TestUserShare(t *testing.T) {
	const slots = 4
	f := newFixture(t, scan.Options{MaxProcesses: slots})
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	for range slots {
		p := testpub.StartAs(t, testpub.Glibc, nobody)
		p.Publish()
		f.own(p.PID)
	}
	evs, st := f.scan()
	if len(evs) != slots/2 || st.Failures[scan.ReasonUserShare] != slots/2 || st.Failures[scan.ReasonProcessLimit] != 0 {
		t.Fatalf("nobody's %d publishers: events %s, stats %+v; want %d found, %d refused as user_share", slots, describe(evs), st, slots/2, slots/2)
	}
	for _, e := range evs {
		if e.Process.UID != 65534 {
			t.Fatalf("publisher %d: UID %d, want 65534", e.Process.ID.PID, e.Process.UID)
		}
	}
	root := testpub.Start(t, testpub.Glibc)
	root.Publish()
	f.own(root.PID)
	evs, st = f.scan()
	if e := findEvent(evs, publisher.Found, root.PID); e == nil || e.Process.UID != 0 || st.ContextsTracked != slots/2+1 {
		t.Fatalf("root's publisher beside nobody's: events %s, stats %+v", describe(evs), st)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"testing"

	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// TestScannerStampOnlyIsNotAnUpdate: a publisher that publishes the same
// payload again (a new stamp, the same content) gets no Updated event; the
// new stamp is kept (the next poll is 8 bytes again, no full read); a real
// change after that is still Updated.
func TestScannerStampOnlyIsNotAnUpdate(t *testing.T) {
	f := newFixture(t, scan.Options{})
	p := testpub.Start(t, testpub.Glibc)
	f.own(p.PID)
	p.Set("service.name", "stamp-only", "service.instance.id", "i-1")
	p.Do("extra deployment.environment.name test")
	p.Do("schema tlsdesc_v1_dev")
	p.Do("keymap http.route")
	_, stamp := p.Publish()
	ev, _ := f.waitEvent(publisher.Found, p.PID)
	first := ev.Process

	for i := 0; i < 5; i++ {
		_, s := p.Publish() // the same payload, a new stamp
		if s <= stamp {
			t.Fatalf("stamp %d after %d", s, stamp)
		}
		stamp = s
		evs, st := f.scan()
		if len(evs) != 0 {
			t.Fatalf("republish %d: events %s", i, describe(evs))
		}
		cur, ok := f.s.Lookup(p.PID)
		if !ok || cur.Context.PublishedAtNs != stamp || !cur.Context.SameContent(first.Context) {
			t.Fatalf("republish %d: cached %+v, want stamp %d (stats %+v)", i, cur, stamp, st)
		}
		// The refreshed stamp: the next poll costs one 8-byte read.
		if evs, _ := f.scan(); len(evs) != 0 || f.mustLookup(p.PID) != cur {
			t.Fatalf("poll after republish %d: events %s, or a full read", i, describe(evs))
		}
	}

	p.Set("service.instance.id", "i-2")
	p.Publish()
	up, all := f.waitEvent(publisher.Updated, p.PID)
	if len(all) != 1 || attr(up.Process.Context.Resource.Attributes, "service.instance.id").Str != "i-2" ||
		attr(up.Previous.Context.Resource.Attributes, "service.instance.id").Str != "i-1" {
		t.Fatalf("change after the republishes: %s", describe(all))
	}
}

func (f *fixture) mustLookup(pid int) *publisher.Process {
	f.t.Helper()
	p, ok := f.s.Lookup(pid)
	if !ok {
		f.t.Fatalf("pid %d not tracked", pid)
	}
	return p
}

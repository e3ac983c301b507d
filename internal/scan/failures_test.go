// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// badContexts are publisher commands that break a published context, and
// the reason a read of it must fail with.
var badContexts = []struct {
	name   string
	cmds   []string
	reason scan.Reason
}{
	{"garbage payload", []string{"garbage 64"}, scan.ReasonMalformedPayload},
	{"payload_size 100000000", []string{"raw size 100000000"}, scan.ReasonPayloadSize},
	{"payload_size 0", []string{"raw size 0"}, scan.ReasonPayloadSize},
	{"payload pointer unmapped", []string{"raw payload 0x10"}, scan.ReasonBadAddress},
	// FILE: a file the publisher mapped without touching it (expandCmd).
	// Read, it would decode as garbage; a read of a file mapping may block
	// on its file system.
	{"payload pointer in a file mapping", []string{"raw payload FILE"}, scan.ReasonFileBacked},
	{"bad signature", []string{"raw sig XXXXXXXX"}, scan.ReasonInvalidHeader},
	{"version 1", []string{"raw version 1"}, scan.ReasonInvalidHeader},
	{"version 3", []string{"raw version 3"}, scan.ReasonInvalidHeader},
}

// TestScannerBadContextNeverFound: a process whose context is broken from
// the start is never Found, and every look at it counts one failure under
// the right reason.
func TestScannerBadContextNeverFound(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		for _, bc := range badContexts {
			t.Run(bc.name, func(t *testing.T) {
				f := newFixture(t, scan.Options{})
				p := testpub.Start(t, libc)
				f.own(p.PID)
				p.Set("service.name", "bad")
				p.Publish()
				for _, c := range bc.cmds {
					p.Do("%s", expandCmd(t, p, c))
				}
				for i := 0; i < 3; i++ {
					if i > 0 {
						f.s.Rescan(p.PID)
					}
					evs, st := f.scan()
					want := map[scan.Reason]int{bc.reason: 1}
					if len(evs) != 0 || st.ProcessesScanned != 1 || !equalFailures(failures(st), want) {
						t.Fatalf("scan %d: events %s, scanned %d, failures %v; want none, 1, %v", i, describe(evs), st.ProcessesScanned, failures(st), want)
					}
				}
				_, err := f.s.ReadPID(p.PID)
				if err == nil || scan.ReasonOf(err) != bc.reason {
					t.Fatalf("ReadPID = %v, want reason %v", err, bc.reason)
				}
			})
		}
	})
}

// TestScannerValidTurnsBad: a tracked publisher whose context turns bad is
// Lost, counted under the right reason.
func TestScannerValidTurnsBad(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		for _, bc := range badContexts {
			t.Run(bc.name, func(t *testing.T) {
				f := newFixture(t, scan.Options{})
				p := testpub.Start(t, libc)
				f.own(p.PID)
				p.Set("service.name", "turns-bad")
				p.Publish()
				found, _ := f.waitEvent(publisher.Found, p.PID)
				for _, c := range bc.cmds {
					p.Do("%s", expandCmd(t, p, c))
				}
				var lost *publisher.Event
				_, st := f.scanUntil("Lost", func(evs []publisher.Event, _ scan.Stats) bool {
					lost = findEvent(evs, publisher.Lost, p.PID)
					return lost != nil
				})
				if lost.Process != found.Process {
					t.Fatal("Lost is not the Found process")
				}
				if st.Failures[bc.reason] != 1 {
					t.Fatalf("failures %v, want one %v", failures(st), bc.reason)
				}
				if _, ok := f.s.Lookup(p.PID); ok {
					t.Fatal("still tracked")
				}
				// An unchanged broken publisher is not re-read: its stamp is
				// compared (one 8-byte read) and nothing is counted.
				f.s.Rescan(p.PID)
				evs, st := f.scan()
				if len(evs) != 0 || len(failures(st)) != 0 || st.ProcessesScanned != 0 {
					t.Fatalf("rescan of an unchanged broken publisher: events %s, stats %+v", describe(evs), st)
				}
				// Repaired: Found again once looked at.
				p.Do("raw sig OTEL_CTX")
				p.Do("raw version 2")
				p.Set("service.name", "repaired")
				p.Publish()
				f.s.Rescan(p.PID)
				again, _ := f.waitEvent(publisher.Found, p.PID)
				if attr(again.Process.Context.Resource.Attributes, "service.name").Str != "repaired" {
					t.Fatalf("repaired context: %+v", again.Process.Context)
				}
			})
		}
	})
}

// TestScannerUpdateStuckInProgress: a publisher that stays mid-update
// (published_at_ns 0) costs a bounded number of reads per scan, is counted
// as a concurrent update, and keeps its last good context: it is not Lost.
func TestScannerUpdateStuckInProgress(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		f := newFixture(t, scan.Options{})
		p := testpub.Start(t, libc)
		f.own(p.PID)
		p.Set("service.name", "stuck")
		addr, _ := p.Publish()
		found, _ := f.waitEvent(publisher.Found, p.PID)
		p.Do("raw stamp 0")
		for i := 0; i < 3; i++ {
			evs, st := f.scan()
			if len(evs) != 0 || st.Failures[scan.ReasonConcurrentUpdate] != 1 || st.Retries != processctx.DefaultAttempts-1 {
				t.Fatalf("scan %d: events %s, stats %+v", i, describe(evs), st)
			}
			if pr, ok := f.s.Lookup(p.PID); !ok || pr != found.Process {
				t.Fatal("the last good context was dropped")
			}
		}
		_, _, err := processctx.ReadRaw(remote.Memory{PID: p.PID}, addr, processctx.DefaultMaxPayloadSize, 3, nil)
		if !errors.Is(err, processctx.ErrUpdateInProgress) {
			t.Fatalf("ReadRaw = %v", err)
		}
		// Never published completely: never Found.
		q := testpub.Start(t, libc)
		f.own(q.PID)
		q.Publish()
		q.Do("raw stamp 0")
		f.s.Rescan(q.PID)
		if evs, st := f.scan(); len(evs) != 0 || st.Failures[scan.ReasonConcurrentUpdate] != 2 {
			t.Fatalf("stuck new publisher: events %s, failures %v", describe(evs), failures(st))
		}
	})
}

// TestScannerLimitsExceeded: values over the configured limits are cut and
// counted, the context is still Found.
func TestScannerLimitsExceeded(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		lim := processctx.DefaultLimits()
		lim.MaxValueLength = 100
		lim.MaxAttributes = 4
		f := newFixture(t, scan.Options{Limits: lim})
		p := testpub.Start(t, libc)
		f.own(p.PID)
		p.Set("service.name", strings.Repeat("s", 5000), "a", "1", "b", "2", "c", "3", "d", "4")
		p.Publish()
		var found *publisher.Event
		_, st := f.scanUntil("Found", func(evs []publisher.Event, _ scan.Stats) bool {
			found = findEvent(evs, publisher.Found, p.PID)
			return found != nil
		})
		pr := found.Process
		if st.LimitsExceeded != 1 || pr.DecodeStats.TruncatedValues != 1 || pr.DecodeStats.DroppedAttributes != 1 ||
			len(pr.Context.Resource.Attributes) != 4 || pr.Context.Resource.DroppedAttributesCount != 1 ||
			attr(pr.Context.Resource.Attributes, "service.name").Str != strings.Repeat("s", 100) {
			t.Fatalf("limits: stats %+v, decode stats %+v, resource %d attributes, dropped %d", st, pr.DecodeStats, len(pr.Context.Resource.Attributes), pr.Context.Resource.DroppedAttributesCount)
		}
	})
}

// TestScannerProcessLimit: with MaxProcesses 1, a second publisher is not
// tracked and counted as process_limit; it is picked up once the first goes.
func TestScannerProcessLimit(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		f := newFixture(t, scan.Options{MaxProcesses: 1})
		a, b := testpub.Start(t, libc), testpub.Start(t, libc)
		f.own(a.PID, b.PID)
		a.Publish()
		b.Publish()
		evs, st := f.scan()
		if len(evs) != 1 || evs[0].Kind != publisher.Found || st.ContextsTracked != 1 || st.Failures[scan.ReasonProcessLimit] != 1 || st.ContextMemory <= 0 {
			t.Fatalf("events %s, stats %+v", describe(evs), st)
		}
		kept, other := a, b
		if evs[0].Process.ID.PID == b.PID {
			kept, other = b, a
		}
		f.s.Rescan(other.PID)
		if evs, st := f.scan(); len(evs) != 0 || st.Failures[scan.ReasonProcessLimit] != 1 {
			t.Fatalf("still at the limit: events %s, stats %+v", describe(evs), st)
		}
		kept.Exit()
		f.waitEvent(publisher.Lost, kept.PID)
		f.s.Rescan(other.PID)
		evs, st = f.scan()
		if findEvent(evs, publisher.Found, other.PID) == nil || st.ContextsTracked != 1 || len(failures(st)) != 0 {
			t.Fatalf("after the first left: events %s, stats %+v", describe(evs), st)
		}
	})
}

// TestScannerFilter: the filter is asked with the PID and executable name,
// and a refused process is never examined.
func TestScannerFilter(t *testing.T) {
	exe := testpub.Build(t, testpub.Glibc)
	a, b := testpub.StartBinary(t, exe), testpub.StartBinary(t, exe)
	a.Publish()
	b.Publish()

	t.Run("by pid", func(t *testing.T) {
		asked := map[int]string{}
		var f *fixture
		f = newFixture(t, scan.Options{Filter: func(pid int, name string) bool {
			if f.ours[pid] {
				asked[pid] = name
			}
			return pid == a.PID
		}})
		f.own(a.PID, b.PID)
		evs, _ := f.scan()
		if len(evs) != 1 || findEvent(evs, publisher.Found, a.PID) == nil {
			t.Fatalf("events %s", describe(evs))
		}
		if asked[a.PID] != exeName(exe) || asked[b.PID] != exeName(exe) {
			t.Fatalf("filter asked with %v, want executable name %q", asked, exeName(exe))
		}
		f.s.Rescan(b.PID)
		if evs, st := f.scan(); len(evs) != 0 || st.ProcessesScanned != 0 {
			t.Fatalf("filtered process examined: events %s, stats %+v", describe(evs), st)
		}
	})
	t.Run("by name", func(t *testing.T) {
		f := newFixture(t, scan.Options{Filter: func(_ int, name string) bool { return name != exeName(exe) }})
		f.own(a.PID, b.PID)
		if evs, _ := f.scan(); len(evs) != 0 {
			t.Fatalf("events %s", describe(evs))
		}
		// Without the filter both are found: the filter made the difference.
		g := newFixture(t, scan.Options{Filter: func(int, string) bool { return true }})
		g.own(a.PID, b.PID)
		if evs, _ := g.scan(); findEvent(evs, publisher.Found, a.PID) == nil || findEvent(evs, publisher.Found, b.PID) == nil {
			t.Fatalf("unfiltered: events %s", describe(evs))
		}
	})
}

// TestScannerRescan: a process in backoff is only examined again when
// Rescan asks for it, and only once.
func TestScannerRescan(t *testing.T) {
	f := newFixture(t, scan.Options{})
	p := testpub.Start(t, testpub.Glibc)
	f.own(p.PID)
	if evs, st := f.scan(); len(evs) != 0 || st.ProcessesScanned != 1 {
		t.Fatalf("first scan: events %s, stats %+v", describe(evs), st)
	}
	p.Set("service.name", "late")
	p.Publish()
	for i := 0; i < 2; i++ {
		if evs, st := f.scan(); len(evs) != 0 || st.ProcessesScanned != 0 {
			t.Fatalf("in backoff, scan %d: events %s, stats %+v", i, describe(evs), st)
		}
	}
	f.s.Rescan(p.PID)
	evs, st := f.scan()
	if findEvent(evs, publisher.Found, p.PID) == nil || st.ProcessesScanned != 1 {
		t.Fatalf("after Rescan: events %s, stats %+v", describe(evs), st)
	}
	// Rescan of an unknown or tracked PID is harmless.
	f.s.Rescan(p.PID)
	f.s.Rescan(1 << 30)
	if evs, st := f.scan(); len(evs) != 0 || st.Polled != 1 || st.ProcessesScanned != 0 {
		t.Fatalf("rescan of a tracked pid: events %s, stats %+v", describe(evs), st)
	}
}

// TestReadPID reads one process on demand, independently of tracking.
func TestReadPID(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		exe := testpub.Build(t, libc)
		f := newFixture(t, scan.Options{})
		p := testpub.StartBinary(t, exe)
		p.Set("service.name", "read-pid")
		p.Do("extra e v")
		addr, stamp := p.Publish()
		pr, err := f.s.ReadPID(p.PID)
		if err != nil {
			t.Fatal(err)
		}
		if pr.ID.PID != p.PID || pr.ID.StartTicks != startTicks(t, p.PID) || pr.MappingAddr != addr ||
			pr.MappingName != "/memfd:OTEL_CTX (deleted)" || pr.ExecutablePath != exe || pr.ExecutableName != exeName(exe) ||
			pr.Context.PublishedAtNs != stamp || attr(pr.Context.Resource.Attributes, "service.name").Str != "read-pid" ||
			attr(pr.Context.Attributes, "e").Str != "v" {
			t.Fatalf("ReadPID = %+v", pr)
		}
		if _, ok := f.s.Lookup(p.PID); ok {
			t.Fatal("ReadPID started tracking")
		}
		// Non-publishers.
		if _, err := f.s.ReadPID(os.Getpid()); !errors.Is(err, scan.ErrNoContext) {
			t.Fatalf("ReadPID(self) = %v", err)
		}
		q := testpub.StartBinary(t, exe)
		if _, err := f.s.ReadPID(q.PID); !errors.Is(err, scan.ErrNoContext) {
			t.Fatalf("ReadPID(unpublished) = %v", err)
		}
		if _, err := f.s.ReadPID(2); !errors.Is(err, scan.ErrNoContext) { // kthreadd
			t.Fatalf("ReadPID(kthreadd) = %v", err)
		}
		q.Exit()
		if _, err := f.s.ReadPID(q.PID); err == nil || scan.ReasonOf(err) != scan.ReasonProcessGone {
			t.Fatalf("ReadPID(exited) = %v", err)
		}
	})
}

func equalFailures(a, b map[scan.Reason]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// expandCmd replaces FILE in a publisher command with the address of a
// 64 KiB file the publisher maps without touching it.
func expandCmd(t *testing.T, p *testpub.Publisher, cmd string) string {
	if !strings.Contains(cmd, "FILE") {
		return cmd
	}
	path := filepath.Join(t.TempDir(), "mapped")
	if err := os.WriteFile(path, make([]byte, 65536), 0o600); err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(cmd, "FILE", p.Do("mapfile %s", path)[0])
}

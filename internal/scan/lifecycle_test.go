// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"errors"
	"os"
	"strconv"
	"testing"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/procmaps"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// TestScannerForkedChildHasNoContext: the context mapping is MADV_DONTFORK,
// so a forked child has none and must never be Found, while its parent is.
func TestScannerForkedChildHasNoContext(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		f := newFixture(t, scan.Options{})
		p := testpub.Start(t, libc)
		p.Set("service.name", "parent")
		p.Publish()
		child, err := strconv.Atoi(p.Do("fork")[0])
		if err != nil {
			t.Fatal(err)
		}
		f.own(p.PID, child)

		// The kernel agrees: the child has no OTEL_CTX mapping.
		if m, err := procmaps.FindNamed("/proc", child, "OTEL_CTX", nil); err != nil || len(m) != 0 {
			t.Fatalf("child maps: %+v, %v", m, err)
		}
		evs, st := f.scan()
		if findEvent(evs, publisher.Found, p.PID) == nil || st.ProcessesScanned != 2 {
			t.Fatalf("first scan: events %s, stats %+v; want the parent Found and both processes examined", describe(evs), st)
		}
		for i := 0; i < 3; i++ {
			f.s.Rescan(child)
			evs, st = f.scan()
			if len(evs) != 0 || st.ProcessesScanned != 1 {
				t.Fatalf("rescan %d of the child: events %s, stats %+v", i, describe(evs), st)
			}
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(child)); err != nil {
			t.Fatalf("the child is gone, the test proved nothing: %v", err)
		}
		if _, err := f.s.ReadPID(child); !errors.Is(err, scan.ErrNoContext) {
			t.Fatalf("ReadPID(child) = %v, want ErrNoContext", err)
		}
		if _, ok := f.s.Lookup(child); ok {
			t.Fatal("child tracked")
		}
	})
}

// TestScannerExitIsLost: a publisher that exits is Lost, with the identity
// it was Found with.
func TestScannerExitIsLost(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		f := newFixture(t, scan.Options{})
		p := testpub.Start(t, libc)
		f.own(p.PID)
		p.Set("service.name", "exits")
		p.Publish()
		found, _ := f.waitEvent(publisher.Found, p.PID)
		p.Exit()
		lost, all := f.waitEvent(publisher.Lost, p.PID)
		if lost.Process != found.Process || len(all) != 1 {
			t.Fatalf("Lost %+v; events %s", lost.Process, describe(all))
		}
		if _, ok := f.s.Lookup(p.PID); ok {
			t.Fatal("still tracked after Lost")
		}
		evs, st := f.scan()
		if len(evs) != 0 || st.ContextsTracked != 0 || st.Polled != 0 {
			t.Fatalf("after Lost: events %s, stats %+v", describe(evs), st)
		}
	})
}

// TestScannerDropIsLost: unmapping the context (the process lives on) is
// Lost; publishing again is Found again after Rescan, at the new address.
func TestScannerDropIsLost(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		f := newFixture(t, scan.Options{})
		p := testpub.Start(t, libc)
		f.own(p.PID)
		p.Set("service.name", "drops")
		addr, _ := p.Publish()
		found, _ := f.waitEvent(publisher.Found, p.PID)
		p.Do("drop")
		lost, _ := f.waitEvent(publisher.Lost, p.PID)
		if lost.Process != found.Process {
			t.Fatal("Lost is not the Found process")
		}
		if _, ok := f.s.Lookup(p.PID); ok {
			t.Fatal("still tracked after drop")
		}
		p.Set("service.name", "drops-again")
		addr2, stamp2 := p.Publish()
		// In backoff (RecheckMin is an hour here): not looked at without Rescan.
		if evs, st := f.scan(); len(evs) != 0 || st.ProcessesScanned != 0 {
			t.Fatalf("a PID in backoff was examined: events %s, stats %+v", describe(evs), st)
		}
		f.s.Rescan(p.PID)
		evs, st := f.scan()
		again := findEvent(evs, publisher.Found, p.PID)
		if again == nil || st.ProcessesScanned != 1 {
			t.Fatalf("after Rescan: events %s, stats %+v", describe(evs), st)
		}
		pr := again.Process
		if pr.MappingAddr != addr2 || pr.Context.PublishedAtNs != stamp2 || attr(pr.Context.Resource.Attributes, "service.name").Str != "drops-again" || pr.ID != found.Process.ID {
			t.Fatalf("found again: %+v (old mapping %#x)", pr, addr)
		}
	})
}

// TestScannerAnonFallbackNotDiscovered: the anonymous-mapping fallback is
// only discoverable when the kernel can name it ([anon:OTEL_CTX]). Where
// naming fails (CONFIG_ANON_VMA_NAME off, as on the project's machines) the
// context exists in memory but must not be discovered, by design.
func TestScannerAnonFallbackNotDiscovered(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		f := newFixture(t, scan.Options{})
		p := testpub.Start(t, libc)
		f.own(p.PID)
		p.Set("service.name", "anon")
		p.Do("anon")
		addr, stamp := p.Publish()

		// The context is really there.
		raw, _, err := processctx.ReadRaw(remote.Memory{PID: p.PID}, addr, processctx.DefaultMaxPayloadSize, 3, nil)
		if err != nil || raw.PublishedAtNs != stamp {
			t.Fatalf("reading the anonymous context directly: %v", err)
		}
		m := mappingAt(t, p.PID, addr)
		switch m.Name {
		case "[anon:OTEL_CTX]":
			t.Logf("the kernel names anonymous mappings: expecting discovery")
			ev, _ := f.waitEvent(publisher.Found, p.PID)
			if ev.Process.MappingName != "[anon:OTEL_CTX]" || ev.Process.MappingAddr != addr {
				t.Fatalf("found %+v", ev.Process)
			}
			return
		case "":
		default:
			t.Fatalf("anonymous fallback mapping named %q", m.Name)
		}
		for i := 0; i < 3; i++ {
			f.s.Rescan(p.PID)
			evs, st := f.scan()
			if len(evs) != 0 || st.ProcessesScanned != 1 {
				t.Fatalf("scan %d: events %s, stats %+v", i, describe(evs), st)
			}
		}
		if _, err := f.s.ReadPID(p.PID); !errors.Is(err, scan.ErrNoContext) {
			t.Fatalf("ReadPID = %v, want ErrNoContext", err)
		}
	})
}

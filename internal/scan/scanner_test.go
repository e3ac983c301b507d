// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// TestScannerFoundUpdatedUnchanged: a first publication is Found with
// exactly what was published and the process's metadata; an update is
// Updated; an unchanged publisher costs one stamp read and nothing else.
func TestScannerFoundUpdatedUnchanged(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		for _, placement := range []string{"heap", "inline"} {
			t.Run(placement, func(t *testing.T) {
				exe := testpub.Build(t, libc)
				f := newFixture(t, scan.Options{})
				before := time.Now()
				p := testpub.StartBinary(t, exe)
				after := time.Now()
				f.own(p.PID)

				p.Do("placement %s", placement)
				p.Set("service.name", "checkout-"+libc.Name(), "service.instance.id", "instance-1")
				p.Do("setint process.custom.count 42")
				p.Do("setint process.custom.negative -7")
				p.Do("extra deployment.environment.name test")
				p.Do("schema tlsdesc_v1_dev")
				p.Do("keymap http.route,http.request.method")
				addr, stamp := p.Publish()

				// The publisher did what was asked, seen from outside.
				h := remoteHeader(t, p.PID, addr)
				inside := h.PayloadAddr >= addr && h.PayloadAddr < addr+64<<10
				if placement == "inline" && h.PayloadAddr != addr+64 || placement == "heap" && inside {
					t.Fatalf("%s placement: payload at %#x, mapping at %#x", placement, h.PayloadAddr, addr)
				}

				ev, _ := f.waitEvent(publisher.Found, p.PID)
				got := ev.Process
				if got.ID != (publisher.ProcessID{PID: p.PID, StartTicks: startTicks(t, p.PID)}) {
					t.Fatalf("ID = %+v", got.ID)
				}
				if got.ExecutablePath != exe || got.ExecutableName != exeName(exe) {
					t.Fatalf("executable = %q, %q; want %q", got.ExecutablePath, got.ExecutableName, exe)
				}
				// btime has a resolution of one second and ticks of 10ms.
				if got.CreationTime.Before(before.Add(-2*time.Second)) || got.CreationTime.After(after.Add(2*time.Second)) {
					t.Fatalf("CreationTime %v, process started in [%v, %v]", got.CreationTime, before, after)
				}
				if got.MappingAddr != addr || got.MappingName != "/memfd:OTEL_CTX (deleted)" {
					t.Fatalf("mapping %#x %q, want %#x /memfd:OTEL_CTX (deleted)", got.MappingAddr, got.MappingName, addr)
				}
				want := processctx.Context{
					PublishedAtNs: stamp,
					Resource: processctx.Resource{Attributes: []processctx.Attribute{
						{Key: "service.name", Value: processctx.Value{Kind: processctx.KindStr, Str: "checkout-" + libc.Name()}},
						{Key: "service.instance.id", Value: processctx.Value{Kind: processctx.KindStr, Str: "instance-1"}},
						{Key: "process.custom.count", Value: processctx.Value{Kind: processctx.KindInt, Int: 42}},
						{Key: "process.custom.negative", Value: processctx.Value{Kind: processctx.KindInt, Int: -7}},
					}},
					Attributes: []processctx.Attribute{
						{Key: "deployment.environment.name", Value: processctx.Value{Kind: processctx.KindStr, Str: "test"}},
					},
					ThreadLocal: processctx.ThreadLocal{
						SchemaVersion:   "tlsdesc_v1_dev",
						AttributeKeyMap: []string{"http.route", "http.request.method"},
					},
				}
				if !reflect.DeepEqual(got.Context, want) {
					t.Fatalf("context:\n got %+v\nwant %+v", got.Context, want)
				}
				if ds := got.DecodeStats; ds != (processctx.DecodeStats{DecodedSize: ds.DecodedSize}) {
					t.Fatalf("DecodeStats %+v", got.DecodeStats)
				}
				if lp, ok := f.s.Lookup(p.PID); !ok || lp != got {
					t.Fatal("Lookup does not return the Found process")
				}

				// Unchanged: one 8-byte poll, no maps, no full read, no event.
				evs, st := f.scan()
				if len(evs) != 0 || st.Polled != 1 || st.ProcessesScanned != 0 || st.Retries != 0 || len(failures(st)) != 0 || st.ContextsTracked != 1 {
					t.Fatalf("unchanged poll: events %s, stats %+v", describe(evs), st)
				}
				if lp, _ := f.s.Lookup(p.PID); lp != got {
					t.Fatal("an unchanged poll replaced the Process: it did a full read")
				}

				// Update: new values, same mapping, same identity.
				p.Set("service.version", "2.0.0")
				p.Do("setint process.custom.count 43")
				p.Do("extra deployment.environment.name prod")
				p.Do("keymap http.route,http.request.method,user.id")
				addr2, stamp2 := p.Publish()
				if addr2 != addr || stamp2 <= stamp {
					t.Fatalf("update: addr %#x stamp %d after %#x %d", addr2, stamp2, addr, stamp)
				}
				up, all := f.waitEvent(publisher.Updated, p.PID)
				if len(all) != 1 {
					t.Fatalf("events: %s", describe(all))
				}
				if up.Previous != got {
					t.Fatal("Updated.Previous is not the previous Process")
				}
				n := up.Process
				if n.ID != got.ID || n.MappingAddr != addr || n.CreationTime != got.CreationTime || n.ExecutablePath != exe {
					t.Fatalf("identity changed on update: %+v", n)
				}
				if n.Context.PublishedAtNs != stamp2 ||
					attr(n.Context.Resource.Attributes, "service.version").Str != "2.0.0" ||
					attr(n.Context.Resource.Attributes, "process.custom.count").Int != 43 ||
					attr(n.Context.Attributes, "deployment.environment.name").Str != "prod" ||
					!reflect.DeepEqual(n.Context.ThreadLocal.AttributeKeyMap, []string{"http.route", "http.request.method", "user.id"}) {
					t.Fatalf("updated context: %+v", n.Context)
				}
				// The previous Process was not modified.
				if !reflect.DeepEqual(got.Context, want) {
					t.Fatal("the update modified the previous Process")
				}
				evs, st = f.scan()
				if len(evs) != 0 || st.Polled != 1 || st.ProcessesScanned != 0 {
					t.Fatalf("poll after the update: events %s, stats %+v", describe(evs), st)
				}
			})
		}
	})
}

// TestScannerHeapUpdatesFreeOldPayload: with heap placement every update
// mallocs a new payload and frees the old one; many updates in a row are
// all read.
func TestScannerHeapUpdates(t *testing.T) {
	testpub.ForEachLibc(t, func(t *testing.T, libc testpub.Libc) {
		f := newFixture(t, scan.Options{})
		p := testpub.Start(t, libc)
		f.own(p.PID)
		p.Set("service.name", "heap")
		p.Publish()
		f.waitEvent(publisher.Found, p.PID)
		for i := 0; i < 20; i++ {
			// Growing values: the allocator has to move the payload.
			p.Set("grow", fmt.Sprintf("%0*d", 10+i*50, i))
			_, stamp := p.Publish()
			up, _ := f.waitEvent(publisher.Updated, p.PID)
			if up.Process.Context.PublishedAtNs != stamp || len(attr(up.Process.Context.Resource.Attributes, "grow").Str) != 10+i*50 {
				t.Fatalf("update %d: %+v", i, up.Process.Context)
			}
		}
	})
}

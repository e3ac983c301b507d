package processctxreceiver

import (
	"context"
	"fmt"
	"github.com/otelctx/otelctx/internal/scan/sampler/samplertest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/scan/processctx"
	"github.com/otelctx/otelctx/internal/testpub"
	"github.com/otelctx/otelctx/internal/threadpub"
)

func ebpfConfig(pids ...int) *Config {
	cfg := fastConfig(pids...)
	cfg.ThreadSampler = ThreadSamplerEBPF
	// Many samples quickly: the test threads run for tens of ms at a time.
	cfg.ThreadContext.FrequencyHz = 997
	return cfg
}

// The eBPF path end to end: a busy thread's record reaches the catalog
// with its attributes named, its withdrawal too (no record then), and the
// process's threads go with it.
func TestThreadSamplerEBPF(t *testing.T) {
	samplertest.Require(t)
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.SharedLib, Dialect: threadpub.TLSDESC})
	p.Threads(1)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	_, _, cat := startReceiver(t, ebpfConfig(p.PID), tel)
	eventually(t, "the process in the catalog", func() bool { _, ok := cat.Process(p.PID); return ok })

	truth := p.Set(0, threadpub.Record{TraceID: [16]byte{0x0a, 0xf7}, SpanID: [8]byte{0xb7, 0xad}, Flags: 1,
		Attrs: map[uint8]string{0: "/checkout", 1: "POST"}})
	// The sampler sees a thread while it runs: keep it busy until seen.
	eventually(t, "the busy thread's record in the catalog", func() bool {
		p.Do("spin 0 20")
		_, _, ok := cat.Thread(p.PID, truth.TID)
		return ok
	})
	rec, seen, _ := cat.Thread(p.PID, truth.TID)
	if rec.Record.TraceID != [16]byte{0x0a, 0xf7} || rec.Record.SpanID != [8]byte{0xb7, 0xad} || rec.Record.TraceFlags != 1 ||
		fmt.Sprint(rec.Attributes) != "map[http.request.method:POST http.route:/checkout]" {
		t.Fatalf("record %+v", rec)
	}
	if d := time.Since(seen); d < 0 || d > time.Minute {
		t.Errorf("seen %v ago", d)
	}
	p.Clear(0)
	eventually(t, "the withdrawal (no record) in the catalog", func() bool {
		p.Do("spin 0 20")
		_, _, ok := cat.Thread(p.PID, truth.TID)
		return !ok
	})
	if r, _, ok := cat.ThreadAt(p.PID, truth.TID, time.Now()); !ok || r != nil {
		t.Errorf("ThreadAt(now) = %+v %v, want a known \"no record\"", r, ok)
	}
	if sumOf(t, tel, "otelcol_processctx_thread_samples", "") == 0 {
		t.Error("otelcol_processctx_thread_samples not recorded")
	}
	rcv := rcvOf(t, cat)
	if !rcv.sampler.isTracked(p.PID) {
		t.Error("the publisher is not tracked by the sampler")
	}
	p.Kill()
	eventually(t, "the catalog to forget the process and the sampler to untrack it", func() bool {
		_, ok := cat.Process(p.PID)
		return !ok && len(cat.History(p.PID, truth.TID)) == 0 && !rcv.sampler.isTracked(p.PID)
	})
}

// With off_cpu the record of a thread is read when it is switched out: a
// worker that publishes and parks at once is seen without running again.
func TestThreadSamplerEBPFOffCPU(t *testing.T) {
	samplertest.Require(t)
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	p.Threads(1)
	cfg := ebpfConfig(p.PID)
	cfg.ThreadContext.FrequencyHz = 1 // ticks alone would take seconds
	cfg.ThreadContext.OffCPU = true
	_, _, cat := startReceiver(t, cfg, nil)
	eventually(t, "the process tracked", func() bool { return rcvOf(t, cat).sampler.isTracked(p.PID) })
	var tid int
	eventually(t, "the parked worker's record", func() bool {
		// Each set publishes and parks: a switch-out with the record.
		tid = p.Set(0, threadpub.Record{TraceID: [16]byte{7}, SpanID: [8]byte{8}}).TID
		r, _, ok := cat.Thread(p.PID, tid)
		return ok && r.Record.SpanID == [8]byte{8}
	})
}

// receivers maps a catalog to its receiver, for tests that look inside.
var receivers sync.Map

func rcvOf(t *testing.T, cat *catalog.Catalog) *processctxReceiver {
	t.Helper()
	r, ok := receivers.Load(cat)
	if !ok {
		t.Fatal("no receiver for this catalog")
	}
	return r.(*processctxReceiver)
}

// A record with a key index the catalog's key map lacks makes the sampler
// path re-read the context once; the name resolves.
func TestThreadSamplerEBPFKeyMapRefresh(t *testing.T) {
	samplertest.Require(t)
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	p.Threads(1)
	cfg := ebpfConfig(p.PID)
	cfg.CollectionInterval, cfg.DiscoveryInterval, cfg.RecheckInterval, cfg.EntityInterval = time.Hour, time.Hour, time.Hour, time.Hour
	_, _, cat := startReceiver(t, cfg, nil)
	eventually(t, "the process in the catalog", func() bool { _, ok := cat.Process(p.PID); return ok })
	// threadpub's keymap update does not call prctl: the catalog keeps the
	// old map until a poll, an hour away.
	p.Do("keymap http.route,http.request.method,user.id,tenant.id")
	tid := p.Set(0, threadpub.Record{TraceID: [16]byte{1}, SpanID: [8]byte{2}, Attrs: map[uint8]string{0: "/t", 3: "acme"}}).TID
	eventually(t, "tenant.id resolved through the refreshed key map", func() bool {
		p.Do("spin 0 20")
		r, _, ok := cat.Thread(p.PID, tid)
		return ok && r.Attributes["tenant.id"] == "acme" && r.Attributes["http.route"] == "/t"
	})
}

// A publication is seen at once through the prctl hook, not at the next
// poll (an hour away here): both a new context and an update.
func TestThreadSamplerPrctlRescan(t *testing.T) {
	samplertest.Require(t)
	pub := testpub.Start(t, testpub.Glibc) // not published yet
	cfg := ebpfConfig(pub.PID)
	cfg.CollectionInterval, cfg.DiscoveryInterval, cfg.RecheckInterval, cfg.EntityInterval = time.Hour, time.Hour, time.Hour, time.Hour
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	sink, _, cat := startReceiver(t, cfg, tel)
	eventually(t, "the first discovery round", func() bool {
		return sumOf(t, tel, "otelcol_processctx_processes_scanned", "") > 0
	})
	if _, ok := cat.Process(pub.PID); ok {
		t.Fatal("published before publishing")
	}

	pub.Set("service.name", "checkout")
	start := time.Now()
	pub.Publish() // returns once the publisher has published (and called prctl)
	eventually(t, "the new context in the catalog", func() bool { _, ok := cat.Process(pub.PID); return ok })
	found := time.Since(start)
	eventually(t, "the entity event", func() bool { return len(sinkEvents(sink)) > 0 })
	event := time.Since(start)

	pub.Set("service.version", "2")
	start = time.Now()
	pub.Publish()
	eventually(t, "the updated context in the catalog", func() bool {
		p, ok := cat.Process(pub.PID)
		if !ok {
			return false
		}
		v, ok := processctx.Lookup(p.Context.Resource.Attributes, "service.version")
		return ok && v.Str == "2"
	})
	updated := time.Since(start)
	t.Logf("publication → catalog: new context %v (entity event %v), update %v; the poll interval is 1h", found, event, updated)
	if found > 100*time.Millisecond || updated > 100*time.Millisecond {
		t.Errorf("the prctl rescan took %v / %v, want ≤ 100ms", found, updated)
	}
	if sumOf(t, tel, "otelcol_processctx_prctl_rescans", "") < 2 {
		t.Errorf("prctl rescans counted: %d", sumOf(t, tel, "otelcol_processctx_prctl_rescans", ""))
	}
}

// A process whose variable appears later (a dlopen after the receiver
// found it) is tracked once its mappings change: the resolution is redone,
// and its records flow.
func TestThreadSamplerEBPFLateLoad(t *testing.T) {
	samplertest.Require(t)
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Dlopen, Dialect: threadpub.TLSDESC, LateLoad: true})
	p.Threads(1)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	_, _, cat := startReceiver(t, ebpfConfig(p.PID), tel)
	eventually(t, "the unresolvable variable counted", func() bool {
		return sumOf(t, tel, "otelcol_processctx_thread_read_failures", "no symbol")+
			sumOf(t, tel, "otelcol_processctx_thread_read_failures", "resolve error") > 0
	})
	p.Load()
	tid := p.Set(0, threadpub.Record{TraceID: [16]byte{3}, SpanID: [8]byte{4}, Attrs: map[uint8]string{2: "late"}}).TID
	eventually(t, "the record after the dlopen", func() bool {
		p.Do("spin 0 20")
		r, _, ok := cat.Thread(p.PID, tid)
		return ok && r.Attributes["user.id"] == "late"
	})
}

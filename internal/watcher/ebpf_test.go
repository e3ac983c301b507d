package watcher

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/ddwriter"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/ddotel"
	"github.com/otelctx/otelctx/internal/scan/processctx"
	"github.com/otelctx/otelctx/internal/scan/procstat"
	"github.com/otelctx/otelctx/internal/scan/sampler"
	"github.com/otelctx/otelctx/internal/scan/sampler/samplertest"
	"github.com/otelctx/otelctx/internal/scan/tlsvar"
	"github.com/otelctx/otelctx/internal/testenv"
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
	_, w, cat := startWatcher(t, ebpfConfig(p.PID), tel)
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
	if !w.sampler.isTracked(p.PID) {
		t.Error("the publisher is not tracked by the sampler")
	}
	p.Kill()
	eventually(t, "the process to leave the live processes and the sampler to untrack it", func() bool {
		_, ok := cat.Process(p.PID)
		return !ok && !w.sampler.isTracked(p.PID)
	})
	if len(cat.History(p.PID, truth.TID)) == 0 {
		t.Error("the exited process's thread history is not retained")
	}
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
	_, w, cat := startWatcher(t, cfg, nil)
	eventually(t, "the process tracked", func() bool { return w.sampler.isTracked(p.PID) })
	var tid int
	eventually(t, "the parked worker's record", func() bool {
		// Each set publishes and parks: a switch-out with the record.
		tid = p.Set(0, threadpub.Record{TraceID: [16]byte{7}, SpanID: [8]byte{8}}).TID
		r, _, ok := cat.Thread(p.PID, tid)
		return ok && r.Record.SpanID == [8]byte{8}
	})
}

// A record with a key index the catalog's key map lacks makes the sampler
// path re-read the context once; the name resolves.
func TestThreadSamplerEBPFKeyMapRefresh(t *testing.T) {
	samplertest.Require(t)
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	p.Threads(1)
	cfg := ebpfConfig(p.PID)
	cfg.CollectionInterval, cfg.DiscoveryInterval, cfg.RecheckInterval = time.Hour, time.Hour, time.Hour
	_, _, cat := startWatcher(t, cfg, nil)
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

// A publication is seen through the prctl hook, not at the next poll (an
// hour away here, far beyond eventually's timeout): a new context and an
// update. The latency is logged, not asserted.
func TestThreadSamplerPrctlRescan(t *testing.T) {
	samplertest.Require(t)
	pub := testpub.Start(t, testpub.Glibc) // not published yet
	cfg := ebpfConfig(pub.PID)
	cfg.CollectionInterval, cfg.DiscoveryInterval, cfg.RecheckInterval = time.Hour, time.Hour, time.Hour
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	rec, _, cat := startWatcher(t, cfg, tel)
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
	eventually(t, "the Found event", func() bool { return len(rec.of(pub.PID, scan.Found)) > 0 })
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
	_, _, cat := startWatcher(t, ebpfConfig(p.PID), tel)
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

// ddReader is a samplerReader without a kernel side, fed with samples by
// the test: the attribution rules of DD_OTEL_CTX slots (the sampler's
// reads are tested with the real programs in internal/scan/sampler).
func ddReader(t *testing.T, w *ddwriter.Writer, syncEvery time.Duration) (*samplerReader, *catalog.Catalog, *componenttest.Telemetry, *trackedProc) {
	t.Helper()
	tel, ttel, stel := readerTelemetry(t)
	ticks, err := procstat.StartTicks("/proc", w.PID)
	if err != nil {
		t.Fatal(err)
	}
	buf := &ddotel.Buffer{Addr: w.Buf, Capacity: w.Capacity}
	p := &scan.Process{ID: scan.ProcessID{PID: w.PID, StartTicks: ticks}, DDBuffer: buf}
	cat := catalog.New()
	cat.Apply([]scan.Event{{Kind: scan.Found, Process: p}})
	r := newSamplerReader(zap.NewNop(), nil, cat, ttel, stel, processctx.Limits{}, nil, syncEvery)
	tp := &trackedProc{proc: p, dd: buf, ddState: &ddState{}}
	r.tracked[w.PID] = tp
	return r, cat, tel, tp
}

func ddSample(pid, tid int, s ddotel.Slot) sampler.Sample {
	return sampler.Sample{PID: pid, TID: tid, SlotTID: tid, Time: time.Now(), Source: sampler.SourceDD, DD: s}
}

// A slot is attributed to the sampled thread only when it can be its own:
// no other live thread maps to it (collision), the thread is one of the
// process's (listed in /proc/PID/task), and it is not the value a previous
// owner of the slot left (stale).
func TestDDSampleAttribution(t *testing.T) {
	testenv.RequireRoot(t)
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 16, Threads: 2})
	// syncEvery 0: the threads are listed again for every sample, as if a
	// sync had passed (the relisting itself is tested below).
	r, cat, tel, _ := ddReader(t, w, 0)
	a := w.Threads[0]
	other := aloneIn(t, w, w.Threads[1], 16, a.TID)
	v := ddotel.Slot{TraceIDHigh: 0x0102030405060708, TraceIDLow: 0x1112131415161718, SpanID: 0x2122232425262728}

	// 1. A thread alone in its slot: attributed, with the W3C ids and the source.
	r.onSample(ddSample(w.PID, a.TID, v))
	rec, _, ok := cat.Thread(w.PID, a.TID)
	if !ok || rec.Source != catalog.SourceDD || rec.Record.TraceID.String() != "01020304050607081112131415161718" ||
		rec.Record.SpanID.String() != "2122232425262728" {
		t.Fatalf("attributed record %+v %v", rec, ok)
	}
	// An empty slot: the thread has no context now.
	r.onSample(ddSample(w.PID, a.TID, ddotel.Slot{}))
	if _, _, ok := cat.Thread(w.PID, a.TID); ok {
		t.Fatal("an empty slot left a record")
	}
	r.onSample(ddSample(w.PID, a.TID, v))

	// 2. A second thread in the same slot: neither is trusted.
	mate, tries := w.Collide(0)
	t.Logf("worker %d and %d share slot %d (%d thread starts)", a.TID, mate.TID, a.TID%16, tries)
	r.onSample(ddSample(w.PID, mate.TID, v))
	r.onSample(ddSample(w.PID, a.TID, ddotel.Slot{TraceIDLow: 5, SpanID: 6}))
	if _, _, ok := cat.Thread(w.PID, mate.TID); ok {
		t.Error("a colliding thread got a record")
	}
	if rec, _, _ := cat.Thread(w.PID, a.TID); rec == nil || rec.Record.SpanID.String() != "2122232425262728" {
		t.Errorf("a colliding thread's record changed: %+v", rec)
	}
	// A TID that is not a thread of the process: not trusted either.
	r.onSample(ddSample(w.PID, 1<<22+1, v))
	if got := sumOf(t, tel, "otelcol_processctx_dd_slots_refused", ddSlotCollision); got != 2 {
		t.Errorf("collisions counted: %d, want 2", got)
	}
	if got := sumOf(t, tel, "otelcol_processctx_dd_slots_refused", ddSlotUnlisted); got != 1 {
		t.Errorf("unlisted counted: %d, want 1 (the TID that is no thread of the process)", got)
	}

	// 3. The first owner exits; the mate is alone in the slot, which still
	// holds the first owner's value until the mate writes.
	w.Exit(0)
	eventually(t, "the worker gone from /proc/PID/task", func() bool {
		tids, err := listThreads(w.PID)
		return err == nil && !slices.Contains(tids, a.TID)
	})
	r.onSample(ddSample(w.PID, mate.TID, v))
	if _, _, ok := cat.Thread(w.PID, mate.TID); ok {
		t.Error("the predecessor's value was attributed to the new owner")
	}
	if got := sumOf(t, tel, "otelcol_processctx_dd_slots_refused", ddSlotStale); got != 1 {
		t.Errorf("stale slots counted: %d, want 1", got)
	}
	mine := ddotel.Slot{TraceIDLow: 0xabc, SpanID: 0xdef}
	r.onSample(ddSample(w.PID, mate.TID, mine))
	if rec, _, ok := cat.Thread(w.PID, mate.TID); !ok || rec.Record.SpanID.String() != "0000000000000def" {
		t.Errorf("the new owner's own write: %+v %v", rec, ok)
	}

	// 4. A sample under another identity (the PID changed hands since the
	// recipe): the catalog refuses it.
	tp := r.tracked[w.PID]
	tp.proc = &scan.Process{ID: scan.ProcessID{PID: w.PID, StartTicks: tp.proc.ID.StartTicks + 1}, DDBuffer: tp.dd}
	r.onSample(ddSample(w.PID, other.TID, v))
	if _, _, ok := cat.Thread(w.PID, other.TID); ok {
		t.Error("a sample for another identity reached the catalog")
	}
}

// Threads are listed again when a sample comes from one not in the last
// list (a new thread), at most every ddRelist; otherwise once per sync
// interval.
func TestDDThreadRelisting(t *testing.T) {
	testenv.RequireRoot(t)
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 1024, Threads: 1})
	r, cat, _, tp := ddReader(t, w, time.Hour)
	v := ddotel.Slot{TraceIDLow: 1, SpanID: 2}
	r.onSample(ddSample(w.PID, w.Threads[0].TID, v))
	first := tp.listedAt
	if _, _, ok := cat.Thread(w.PID, w.Threads[0].TID); !ok || first.IsZero() {
		t.Fatal("first sample not attributed")
	}
	r.onSample(ddSample(w.PID, w.Threads[0].TID, v))
	if tp.listedAt != first {
		t.Error("a known thread's sample relisted the threads before the sync interval")
	}
	nt := aloneIn(t, w, w.Spawn(), 1024, w.Threads[0].TID)
	eventually(t, "the new thread attributed once listed", func() bool {
		r.onSample(ddSample(w.PID, nt.TID, v))
		_, _, ok := cat.Thread(w.PID, nt.TID)
		return ok
	})
	if !tp.listedAt.After(first) {
		t.Error("the new thread was attributed without a new listing")
	}
}

// A process read through both sources: the OTEP 4947 record wins while the
// thread has one; once it is withdrawn, the DD slot speaks for the thread
// (a "no record" from the TLS variable does not hide the slot's context).
func TestDualSourcePrecedence(t *testing.T) {
	testenv.RequireRoot(t)
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 1024, Threads: 1})
	r, cat, _, tp := ddReader(t, w, time.Hour)
	tp.loc = &tlsvar.Location{} // read through the TLS variable too (never dereferenced here)
	tid := w.Threads[0].TID
	otep := func(span byte) sampler.Sample {
		s := sampler.Sample{PID: w.PID, TID: tid, Time: time.Now(), Source: sampler.SourceOTEP4947}
		if span != 0 {
			s.Record = make([]byte, 28)
			s.Record[0], s.Record[16+7], s.Record[24] = 1, span, 1 // trace id, span id, valid
		}
		return s
	}
	dd := ddotel.Slot{TraceIDLow: 0x77, SpanID: 0x88}
	source := func() string {
		rec, _, ok := cat.Thread(w.PID, tid)
		if !ok {
			return "none"
		}
		return rec.Source + "/" + rec.Record.SpanID.String()
	}
	steps := []struct {
		smp  sampler.Sample
		want string
	}{
		{ddSample(w.PID, tid, dd), "dd_otel_ctx/0000000000000088"}, // no TLS record seen: the slot
		{otep(5), "otep4947/0000000000000005"},                     // a TLS record: it wins
		{ddSample(w.PID, tid, dd), "otep4947/0000000000000005"},    // the slot does not replace it
		{otep(0), "none"}, // withdrawn: seen once
		{ddSample(w.PID, tid, dd), "dd_otel_ctx/0000000000000088"}, // then the slot speaks
		{otep(0), "dd_otel_ctx/0000000000000088"},                  // a further "no record" does not hide it
		{ddSample(w.PID, tid, ddotel.Slot{}), "none"},              // the slot emptied
	}
	for i, st := range steps {
		r.onSample(st.smp)
		if got := source(); got != st.want {
			t.Fatalf("step %d (%v sample): %s, want %s", i, st.smp.Source, got, st.want)
		}
	}
}

// TestDDThreadsEBPF: the eBPF path end to end for a real DD_OTEL_CTX writer
// without a process context: busy threads' slots reach the catalog (W3C
// ids, source dd_otel_ctx) through the kernel's reads, threads sharing a
// slot never do (counted as collisions), and during a storm of rewrites no
// torn value enters any thread's history (the kernel's busy/torn refusals
// are counted).
func TestDDThreadsEBPF(t *testing.T) {
	samplertest.Require(t)
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 16, Threads: 3})
	shared, _ := w.Collide(0)
	// Workers 1 and 2 alone in their slots (the main thread included).
	th1 := aloneIn(t, w, w.Threads[1], 16, w.PID, w.Threads[0].TID, shared.TID, w.Threads[2].TID)
	th2 := aloneIn(t, w, w.Threads[2], 16, w.PID, w.Threads[0].TID, shared.TID, th1.TID)
	w.Set(0, 0, 0xaaa, 0xa0)
	w.Set(shared.Index, 0, 0xbbb, 0xb0)
	w.Set(th1.Index, 0x0102030405060708, 0x090a0b0c0d0e0f10, 0x1112131415161718)
	w.Set(th2.Index, 0, 0xccc, 0xc0)
	one, two := th1.TID, th2.TID

	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	cfg := ebpfConfig(w.PID)
	cfg.DDOtelCtx.Processes = DDProcessesAll // the writer is not called java
	_, wr, cat := startWatcher(t, cfg, tel)
	eventually(t, "the writer tracked by the sampler", func() bool { return wr.sampler.isTracked(w.PID) })

	// The kernel reads a thread's slot while it runs: keep them busy.
	for _, i := range []int{0, th1.Index, th2.Index, shared.Index} {
		w.Busy(i)
	}
	eventually(t, "the busy threads' records in the catalog", func() bool {
		_, _, ok1 := cat.Thread(w.PID, one)
		_, _, ok2 := cat.Thread(w.PID, two)
		return ok1 && ok2 && sumOf(t, tel, "otelcol_processctx_dd_slots_refused", ddSlotCollision) > 0
	})
	rec, _, _ := cat.Thread(w.PID, one)
	if rec.Source != catalog.SourceDD || rec.Record.TraceID.String() != "0102030405060708090a0b0c0d0e0f10" ||
		rec.Record.SpanID.String() != "1112131415161718" || rec.Record.TraceFlags != 0 || len(rec.Attributes) != 0 {
		t.Fatalf("record %+v", rec)
	}
	if r, _, _ := cat.Thread(w.PID, two); r.Record.SpanID.String() != "00000000000000c0" {
		t.Fatalf("record %+v", r)
	}
	for _, tid := range []int{w.Threads[0].TID, shared.TID} {
		if r, _, ok := cat.Thread(w.PID, tid); ok {
			t.Errorf("tid %d shares its slot, yet the catalog has %+v", tid, r)
		}
	}
	if p, ok := cat.Process(w.PID); !ok || p.HasContext() || p.DDBuffer == nil {
		t.Fatalf("catalog process %+v", p)
	}

	// Storm: every worker rewrites its slot in a tight loop.
	w.Storm()
	start := len(cat.History(w.PID, one)) + len(cat.History(w.PID, two))
	eventually(t, "storm values in the catalog and refused reads counted", func() bool {
		return len(cat.History(w.PID, one))+len(cat.History(w.PID, two)) >= start+50 &&
			sumOf(t, tel, "otelcol_processctx_dd_slots_refused", ddSlotBusy) > 0
	})
	writes := w.Calm()
	checked := 0
	before := map[int]ddotel.Slot{
		one: {TraceIDHigh: 0x0102030405060708, TraceIDLow: 0x090a0b0c0d0e0f10, SpanID: 0x1112131415161718},
		two: {TraceIDLow: 0xccc, SpanID: 0xc0},
	}
	for _, tid := range []int{one, two} {
		for _, o := range cat.History(w.PID, tid) {
			if o.Record == nil {
				continue
			}
			r := o.Record.Record
			s := ddotel.Slot{
				TraceIDHigh: binary.BigEndian.Uint64(r.TraceID[:8]),
				TraceIDLow:  binary.BigEndian.Uint64(r.TraceID[8:]),
				SpanID:      binary.BigEndian.Uint64(r.SpanID[:]),
			}
			if s == before[tid] {
				continue // the value set before the storm
			}
			checked++
			if !ddwriter.StormOK(tid, s) {
				t.Errorf("tid %d: torn or foreign storm value in the catalog: %+v", tid, s)
			}
		}
	}
	for _, tid := range []int{w.Threads[0].TID, shared.TID} {
		if h := cat.History(w.PID, tid); len(h) != 0 {
			t.Errorf("tid %d shares its slot, yet has a history of %d", tid, len(h))
		}
	}
	t.Logf("storm: %d writes, %d storm values in the catalog all whole; dd_slots_refused busy %d, torn %d, collision %d, stale %d",
		writes, checked, sumOf(t, tel, "otelcol_processctx_dd_slots_refused", ddSlotBusy),
		sumOf(t, tel, "otelcol_processctx_dd_slots_refused", ddSlotTorn),
		sumOf(t, tel, "otelcol_processctx_dd_slots_refused", ddSlotCollision),
		sumOf(t, tel, "otelcol_processctx_dd_slots_refused", ddSlotStale))
	if checked == 0 {
		t.Error("no storm value reached the catalog")
	}

	w.Kill()
	eventually(t, "the catalog to forget the process and the sampler to untrack it", func() bool {
		_, ok := cat.Process(w.PID)
		return !ok && !wr.sampler.isTracked(w.PID)
	})
}

// TestThreadSamplerEBPFPIDReused: the catalog still holds a process
// identity whose PID now belongs to another process (it learns of exits
// only at its next poll), so the eBPF path tracks the PID for the old
// identity. The kernel compares start times and reads nothing: the
// successor's records (readable with the same recipe: same binary) never
// land under the old identity, and the refused ticks are counted as
// 'pid reused'. Once the catalog has the right identity, records flow.
func TestThreadSamplerEBPFPIDReused(t *testing.T) {
	samplertest.Require(t)
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	p.Threads(1)
	tid := p.Set(0, threadpub.Record{TraceID: [16]byte{1}, SpanID: [8]byte{2}}).TID
	sc, err := scan.New(scan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc.Close() })
	proc, err := sc.ReadPID(p.PID)
	if err != nil {
		t.Fatal(err)
	}
	old := *proc
	old.ID.StartTicks-- // a predecessor with this PID, started a tick earlier
	cat := catalog.New()
	cat.Apply([]scan.Event{{Kind: scan.Found, Process: &old}})

	tel, ttel, stel := readerTelemetry(t)
	s, err := sampler.New(sampler.Options{FrequencyHz: 997})
	if err != nil {
		t.Fatal(err)
	}
	// The sync loop runs at start and then only when told (catalogChanged):
	// the interval is an hour.
	r := newSamplerReader(zap.NewNop(), s, cat, ttel, stel, processctx.Limits{}, nil, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	r.start(ctx, &wg)
	t.Cleanup(func() { cancel(); wg.Wait() })

	eventually(t, "the PID tracked for the old identity", func() bool { return r.isTracked(p.PID) })
	eventually(t, "ticks on the successor refused and counted", func() bool {
		p.Do("spin 0 20")
		r.catalogChanged() // a sync records the kernel's counters
		return sumOf(t, tel, "otelcol_processctx_thread_read_failures", reasonPIDReused) > 0
	})
	if rec, _, ok := cat.Thread(p.PID, tid); ok {
		t.Fatalf("the successor's record landed under the old identity: %+v", rec)
	}

	cat.Apply([]scan.Event{{Kind: scan.Lost, Process: &old}, {Kind: scan.Found, Process: proc}})
	r.catalogChanged()
	eventually(t, "the record under the right identity", func() bool {
		p.Do("spin 0 20")
		rec, _, ok := cat.Thread(p.PID, tid)
		return ok && rec.Record.SpanID == [8]byte{2}
	})
	t.Logf("pid reused (ticks refused in the kernel): %d", sumOf(t, tel, "otelcol_processctx_thread_read_failures", reasonPIDReused))
}

// readerTelemetry is a test telemetry and the thread and sampler
// instruments of a reader built on it.
func readerTelemetry(t *testing.T) (*componenttest.Telemetry, *threadTelemetry, *samplerTelemetry) {
	t.Helper()
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	m := tel.NewTelemetrySettings().MeterProvider.Meter(ScopeName)
	ttel, err := newThreadTelemetry(m)
	if err != nil {
		t.Fatal(err)
	}
	stel, err := newSamplerTelemetry(m)
	if err != nil {
		t.Fatal(err)
	}
	return tel, ttel, stel
}

// aloneIn returns th, a worker of w, or, if its slot (capacity) is shared
// with one of others, a new worker whose slot is not (th exits): a test
// that needs a thread alone in its slot does not depend on the TIDs the
// kernel handed out.
func aloneIn(t *testing.T, w *ddwriter.Writer, th ddwriter.Thread, capacity uint32, others ...int) ddwriter.Thread {
	t.Helper()
	for range 64 {
		if !ddotel.Colliding(append([]int{th.TID}, others...), capacity)[th.TID] {
			return th
		}
		w.Exit(th.Index)
		th = w.Spawn()
	}
	t.Fatalf("no worker alone in its slot (capacity %d) after 64 starts", capacity)
	return th
}

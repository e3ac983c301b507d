// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

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

	"github.com/otelctx/otelctx/internal/attribution"
	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/samplertest"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/ptrace"
	"github.com/otelctx/otelctx/internal/threads/sampler"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/otep4947"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

func ebpfConfig(pids ...int) *testConfig {
	cfg := fastConfig(pids...)
	cfg.ThreadSampler = SamplerEBPF
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
	_, w, cat := startSource(t, ebpfConfig(p.PID), tel)
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
	if telemetrytest.Sum(tel, "otelcol_processctx_thread_samples", "reason", "") == 0 {
		t.Error("otelcol_processctx_thread_samples not recorded")
	}
	if !samplerOf(t, w).isTracked(p.PID) {
		t.Error("the publisher is not tracked by the sampler")
	}
	p.Kill()
	eventually(t, "the process to leave the live processes and the sampler to untrack it", func() bool {
		_, ok := cat.Process(p.PID)
		return !ok && !samplerOf(t, w).isTracked(p.PID)
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
	_, w, cat := startSource(t, cfg, nil)
	eventually(t, "the process tracked", func() bool { return samplerOf(t, w).isTracked(p.PID) })
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
	cfg.Interval = time.Hour
	_, _, cat := startSource(t, cfg, nil)
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

// A process whose variable appears later (a dlopen after the receiver
// found it) is tracked once its mappings change: the resolution is redone,
// and its records flow.
func TestThreadSamplerEBPFLateLoad(t *testing.T) {
	samplertest.Require(t)
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Dlopen, Dialect: threadpub.TLSDESC, LateLoad: true})
	p.Threads(1)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	_, _, cat := startSource(t, ebpfConfig(p.PID), tel)
	eventually(t, "the unresolvable variable counted", func() bool {
		return telemetrytest.Sum(tel, "otelcol_processctx_thread_read_failures", "reason", "no symbol")+
			telemetrytest.Sum(tel, "otelcol_processctx_thread_read_failures", "reason", "resolve error") > 0
	})
	p.Load()
	tid := p.Set(0, threadpub.Record{TraceID: [16]byte{3}, SpanID: [8]byte{4}, Attrs: map[uint8]string{2: "late"}}).TID
	eventually(t, "the record after the dlopen", func() bool {
		p.Do("spin 0 20")
		r, _, ok := cat.Thread(p.PID, tid)
		return ok && r.Attributes["user.id"] == "late"
	})
}

// ddReader is an eBPF source without a kernel side, fed with samples by
// the test, tracking w (also through its TLS variable with tls): what the
// reader does with the observations of internal/attribution (their rules
// are tested there; the sampler's reads with the real programs in
// internal/threads/sampler). Its clock moves only with feed.
func ddReader(t *testing.T, w *ddwriter.Writer, tls bool) (*EBPF, *catalog.Catalog, *componenttest.Telemetry, *testClock) {
	t.Helper()
	tel, ttel := readerTelemetry(t)
	ticks, err := procstat.StartTicks("/proc", w.PID)
	if err != nil {
		t.Fatal(err)
	}
	buf := &publisher.Buffer{Schema: ddotel.SchemaName, Addr: w.Buf, Capacity: w.Capacity}
	p := &publisher.Process{ID: publisher.ProcessID{PID: w.PID, StartTicks: ticks}, Buffer: buf}
	cat := catalog.New()
	cat.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
	r := newEBPF(zap.NewNop(), nil, cat, ttel, processctx.Limits{}, time.Hour)
	c := &testClock{t: time.Unix(1000, 0)}
	r.now = c.now
	var loc *tlsvar.Location
	if tls {
		loc = &tlsvar.Location{} // never dereferenced here
	}
	track(t, r, p, loc)
	return r, cat, tel, c
}

// testClock is the clock of a ddReader's thread listings.
type testClock struct{ t time.Time }

func (c *testClock) now() time.Time { return c.t }

// track makes r track p (its DD buffer, and loc) as sync does.
func track(t *testing.T, r *EBPF, p *publisher.Process, loc *tlsvar.Location) {
	t.Helper()
	tp, err := r.newTracked(p, schema.Variable{Schema: &otep4947.Schema, Location: loc}, sampledBuffer(p))
	if err != nil {
		t.Fatal(err)
	}
	r.tracked[p.ID.PID] = tp
}

// feed hands samples to r as the sampler would, then lets a listing
// interval pass: the samples are judged and their observations written.
func feed(r *EBPF, c *testClock, smps ...sampler.Sample) {
	for _, smp := range smps {
		r.onSample(smp)
	}
	c.t = c.t.Add(attribution.DefaultListEvery)
	r.flushSamples()
}

func ddSample(pid, tid int, s ddotel.Slot) sampler.Sample {
	return sampler.Sample{PID: pid, TID: tid, SlotTID: tid, Time: time.Now(), Read: sampler.ReadBufferSlot, Slot: s}
}

// A slot is attributed to the sampled thread only when it can be its own
// (no other thread listed around the sample maps to it; it is not the value
// a previous owner of the slot left), under the identity tracked; what is
// refused is counted by reason.
func TestDDSampleAttribution(t *testing.T) {
	testenv.RequireRoot(t)
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 16, Threads: 2})
	r, cat, tel, c := ddReader(t, w, false)
	a := w.Threads[0]
	other := aloneIn(t, w, w.Threads[1], 16, a.TID)
	v := ddotel.Slot{TraceIDHigh: 0x0102030405060708, TraceIDLow: 0x1112131415161718, SpanID: 0x2122232425262728}

	// 1. A thread alone in its slot: attributed, with the W3C ids and the
	// source, once a listing after the sample was made.
	r.onSample(ddSample(w.PID, a.TID, v))
	if _, _, ok := cat.Thread(w.PID, a.TID); ok {
		t.Fatal("attributed before a listing after the sample")
	}
	feed(r, c)
	rec, _, ok := cat.Thread(w.PID, a.TID)
	if !ok || rec.Source != publisher.SourceDD || rec.Record.TraceID.String() != "01020304050607081112131415161718" ||
		rec.Record.SpanID.String() != "2122232425262728" {
		t.Fatalf("attributed record %+v %v", rec, ok)
	}
	// An empty slot: the thread has no context now.
	feed(r, c, ddSample(w.PID, a.TID, ddotel.Slot{}))
	if _, _, ok := cat.Thread(w.PID, a.TID); ok {
		t.Fatal("an empty slot left a record")
	}
	feed(r, c, ddSample(w.PID, a.TID, v))

	// 2. A second thread in the same slot: neither is trusted, and the
	// thread keeps its record (a refusal says nothing).
	mate, tries := w.Collide(0)
	t.Logf("worker %d and %d share slot %d (%d thread starts)", a.TID, mate.TID, a.TID%16, tries)
	feed(r, c, ddSample(w.PID, mate.TID, v), ddSample(w.PID, a.TID, ddotel.Slot{TraceIDLow: 5, SpanID: 6}))
	if _, _, ok := cat.Thread(w.PID, mate.TID); ok {
		t.Error("a colliding thread got a record")
	}
	if rec, _, _ := cat.Thread(w.PID, a.TID); rec == nil || rec.Record.SpanID.String() != "2122232425262728" {
		t.Errorf("a colliding thread's record changed: %+v", rec)
	}
	// A TID in no listing whose slot a listed thread has: a collision too.
	feed(r, c, ddSample(w.PID, a.TID+16<<16, v))
	if got := telemetrytest.Sum(tel, "otelcol_processctx_dd_slots_refused", "reason", ddSlotCollision); got != 3 {
		t.Errorf("collisions counted: %d, want 3", got)
	}

	// 3. The first owner exits; the mate is alone in the slot, which still
	// holds what either wrote until the mate writes again.
	w.Exit(0)
	eventually(t, "the worker gone from /proc/PID/task", func() bool {
		tids, err := ptrace.ListThreads("/proc", w.PID)
		return err == nil && !slices.Contains(tids, a.TID)
	})
	feed(r, c, ddSample(w.PID, mate.TID, v)) // the listing before still had a
	feed(r, c, ddSample(w.PID, mate.TID, v))
	if _, _, ok := cat.Thread(w.PID, mate.TID); ok {
		t.Error("the predecessor's value was attributed to the new owner")
	}
	if got := telemetrytest.Sum(tel, "otelcol_processctx_dd_slots_refused", "reason", ddSlotStale); got != 1 {
		t.Errorf("stale slots counted: %d, want 1", got)
	}
	mine := ddotel.Slot{TraceIDLow: 0xabc, SpanID: 0xdef}
	feed(r, c, ddSample(w.PID, mate.TID, mine))
	if rec, _, ok := cat.Thread(w.PID, mate.TID); !ok || rec.Record.SpanID.String() != "0000000000000def" {
		t.Errorf("the new owner's own write: %+v %v", rec, ok)
	}

	// 4. A sample under another identity (the PID changed hands since the
	// recipe): the catalog refuses it.
	orig := r.tracked[w.PID]
	track(t, r, &publisher.Process{ID: publisher.ProcessID{PID: w.PID, StartTicks: orig.proc.ID.StartTicks + 1}, Buffer: orig.proc.Buffer}, nil)
	feed(r, c, ddSample(w.PID, other.TID, v))
	if _, _, ok := cat.Thread(w.PID, other.TID); ok {
		t.Error("a sample for another identity reached the catalog")
	}

	// 5. The process exited before its threads could be listed after a
	// sample: nothing vouches for the slot.
	r.tracked[w.PID] = orig
	w.Kill()
	feed(r, c, ddSample(w.PID, other.TID, v))
	if _, _, ok := cat.Thread(w.PID, other.TID); ok {
		t.Error("a sample of an exited process was attributed")
	}
	if got := telemetrytest.Sum(tel, "otelcol_processctx_dd_slots_refused", "reason", ddSlotUnlisted); got != 1 {
		t.Errorf("unlisted counted: %d, want 1", got)
	}
}

// A process read through both sources: the two samples of a capture make
// one observation; the OTEP 4947 record wins while the thread has one;
// once it is withdrawn, the DD slot speaks for the thread (a "no record"
// from the TLS variable does not hide the slot's context).
func TestDualSourcePrecedence(t *testing.T) {
	testenv.RequireRoot(t)
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Capacity: 1024, Threads: 1})
	r, cat, tel, c := ddReader(t, w, true)
	tid := w.Threads[0].TID
	otep := func(span byte) sampler.Sample {
		s := sampler.Sample{PID: w.PID, TID: tid, Time: time.Now(), Read: sampler.ReadVariable}
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
	short := otep(3) // too short to parse: counted, and it says nothing
	short.Record = short.Record[:20]
	steps := []struct {
		smps []sampler.Sample
		want string
	}{
		{[]sampler.Sample{otep(0), ddSample(w.PID, tid, dd)}, "dd_otel_ctx/0000000000000088"}, // no TLS record: the slot
		{[]sampler.Sample{otep(5), ddSample(w.PID, tid, dd)}, "otep4947/0000000000000005"},    // a TLS record: it wins
		{[]sampler.Sample{otep(5)}, "otep4947/0000000000000005"},                              // its DD sample not emitted
		{[]sampler.Sample{otep(0), ddSample(w.PID, tid, dd)}, "dd_otel_ctx/0000000000000088"}, // withdrawn: the slot speaks
		{[]sampler.Sample{otep(0), ddSample(w.PID, tid, ddotel.Slot{})}, "none"},              // both empty
		{[]sampler.Sample{short, ddSample(w.PID, tid, ddotel.Slot{})}, "none"},
	}
	for i, st := range steps {
		feed(r, c, st.smps...)
		if got := source(); got != st.want {
			t.Fatalf("step %d: %s, want %s", i, got, st.want)
		}
	}
	if got := telemetrytest.Sum(tel, "otelcol_processctx_thread_read_failures", "reason", reasonParse); got != 1 {
		t.Errorf("parse errors counted: %d, want 1", got)
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
	cfg.DD = ddscan.SearchAll // the writer is not called java
	_, wr, cat := startSource(t, cfg, tel)
	eventually(t, "the writer tracked by the sampler", func() bool { return samplerOf(t, wr).isTracked(w.PID) })

	// The kernel reads a thread's slot while it runs: keep them busy.
	for _, i := range []int{0, th1.Index, th2.Index, shared.Index} {
		w.Busy(i)
	}
	eventually(t, "the busy threads' records in the catalog", func() bool {
		_, _, ok1 := cat.Thread(w.PID, one)
		_, _, ok2 := cat.Thread(w.PID, two)
		return ok1 && ok2 && telemetrytest.Sum(tel, "otelcol_processctx_dd_slots_refused", "reason", ddSlotCollision) > 0
	})
	rec, _, _ := cat.Thread(w.PID, one)
	if rec.Source != publisher.SourceDD || rec.Record.TraceID.String() != "0102030405060708090a0b0c0d0e0f10" ||
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
	if p, ok := cat.Process(w.PID); !ok || p.HasContext() || p.Buffer == nil {
		t.Fatalf("catalog process %+v", p)
	}

	// Storm: every worker rewrites its slot in a tight loop.
	w.Storm()
	start := len(cat.History(w.PID, one)) + len(cat.History(w.PID, two))
	eventually(t, "storm values in the catalog and refused reads counted", func() bool {
		return len(cat.History(w.PID, one))+len(cat.History(w.PID, two)) >= start+50 &&
			telemetrytest.Sum(tel, "otelcol_processctx_dd_slots_refused", "reason", ddSlotBusy) > 0
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
		writes, checked, telemetrytest.Sum(tel, "otelcol_processctx_dd_slots_refused", "reason", ddSlotBusy),
		telemetrytest.Sum(tel, "otelcol_processctx_dd_slots_refused", "reason", ddSlotTorn),
		telemetrytest.Sum(tel, "otelcol_processctx_dd_slots_refused", "reason", ddSlotCollision),
		telemetrytest.Sum(tel, "otelcol_processctx_dd_slots_refused", "reason", ddSlotStale))
	if checked == 0 {
		t.Error("no storm value reached the catalog")
	}

	w.Kill()
	eventually(t, "the catalog to forget the process and the sampler to untrack it", func() bool {
		_, ok := cat.Process(w.PID)
		return !ok && !samplerOf(t, wr).isTracked(w.PID)
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
	cat.Apply([]publisher.Event{{Kind: publisher.Found, Process: &old}})

	tel, ttel := readerTelemetry(t)
	r := startSamplerReader(t, cat, ttel)

	eventually(t, "the PID tracked for the old identity", func() bool { return r.isTracked(p.PID) })
	eventually(t, "ticks on the successor refused and counted", func() bool {
		p.Do("spin 0 20")
		r.catalogChanged() // a sync records the kernel's counters
		return telemetrytest.Sum(tel, "otelcol_processctx_thread_read_failures", "reason", reasonPIDReused) > 0
	})
	if rec, _, ok := cat.Thread(p.PID, tid); ok {
		t.Fatalf("the successor's record landed under the old identity: %+v", rec)
	}

	cat.Apply([]publisher.Event{{Kind: publisher.Lost, Process: &old}, {Kind: publisher.Found, Process: proc}})
	r.catalogChanged()
	eventually(t, "the record under the right identity", func() bool {
		p.Do("spin 0 20")
		rec, _, ok := cat.Thread(p.PID, tid)
		return ok && rec.Record.SpanID == [8]byte{2}
	})
	t.Logf("pid reused (ticks refused in the kernel): %d", telemetrytest.Sum(tel, "otelcol_processctx_thread_read_failures", "reason", reasonPIDReused))
}

// readerTelemetry is a test telemetry and a source's telemetry on it.
func readerTelemetry(t *testing.T) (*componenttest.Telemetry, *telemetry) {
	t.Helper()
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel, newTelemetry(testTelemetry(t, tel))
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

// A round's events are synced for their PIDs alone: with the full sync an
// hour away, a process found is tracked and a process lost untracked from
// the events, without a sync of every process.
func TestThreadSamplerEBPFSyncsRoundEvents(t *testing.T) {
	samplertest.Require(t)
	p := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	p.Threads(1)
	sc, err := scan.New(scan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc.Close() })
	proc, err := sc.ReadPID(p.PID)
	if err != nil {
		t.Fatal(err)
	}
	cat := catalog.New()
	_, ttel := readerTelemetry(t)
	r := startSamplerReader(t, cat, ttel)

	found := []publisher.Event{{Kind: publisher.Found, Process: proc}}
	cat.Apply(found)
	r.catalogEvents(found)
	eventually(t, "the process found tracked", func() bool { return r.isTracked(p.PID) })
	lost := []publisher.Event{{Kind: publisher.Lost, Process: proc}}
	cat.Apply(lost)
	r.catalogEvents(lost)
	eventually(t, "the process lost untracked", func() bool { return !r.isTracked(p.PID) })
}

// startSamplerReader runs a reader of a 997 Hz sampler on cat until the
// test ends. Its sync loop runs at start and then only when told
// (catalogChanged): the interval is an hour.
func startSamplerReader(t *testing.T, cat *catalog.Catalog, ttel *telemetry) *EBPF {
	t.Helper()
	s, err := sampler.New(sampler.Options{FrequencyHz: 997})
	if err != nil {
		t.Fatal(err)
	}
	r := newEBPF(zap.NewNop(), s, cat, ttel, processctx.Limits{}, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	r.Start(ctx, &wg)
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

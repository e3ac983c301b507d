// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/publisher"
)

// sampleAt returns sample i of the first profile of resource r.
func sampleAt(pd pprofile.Profiles, r, i int) pprofile.Sample {
	return pd.ResourceProfiles().At(r).ScopeProfiles().At(0).Profiles().At(0).Samples().At(i)
}

// sampleAttrs resolves a sample's attributes.
func sampleAttrs(t *testing.T, pd pprofile.Profiles, s pprofile.Sample) map[string]any {
	t.Helper()
	m, err := pprofile.FromAttributeIndices(pd.Dictionary().AttributeTable(), s, pd.Dictionary())
	if err != nil {
		t.Fatal(err)
	}
	return m.AsRaw()
}

func sampleLink(pd pprofile.Profiles, s pprofile.Sample) (pcommon.TraceID, pcommon.SpanID) {
	l := pd.Dictionary().LinkTable().At(int(s.LinkIndex()))
	return l.TraceID(), l.SpanID()
}

// TestSingleProcess: the eBPF profiler's shape (one ResourceProfiles with
// process.pid): the resource is merged by the policy, samples get the link
// and attributes of their thread's record at their time; existing equal
// link and attribute entries are reused; a sample's own link is kept.
func TestSingleProcess(t *testing.T) {
	c := testCatalog(t)
	addCheckout(c, 100, t0)
	recA := span(100, 101, 0xa, 0x1, t0.Add(time.Second), map[string]string{"http.route": "/pay", "tenant": "acme"})
	observe(t, c, 100, 101, recA, t0.Add(time.Second), t0.Add(2*time.Second))
	recB := span(100, 101, 0xb, 0x2, t0.Add(3*time.Second), map[string]string{"http.route": "/refund"})
	observe(t, c, 100, 101, recB, t0.Add(3*time.Second), t0.Add(4*time.Second))
	recC := span(100, 103, 0xc, 0x3, t0.Add(time.Second), nil)
	observe(t, c, 100, 103, recC, t0.Add(time.Second), t0.Add(2*time.Second))

	b := newProfBuilder()
	// The message already holds recA's link and one of its attributes:
	// both must be reused, not added again.
	existingLink := b.Link(0xa, 0x1)
	existingRoute := b.Attr("http.route", "/pay")
	other := b.Link(0xe, 0xe)
	p := b.Resource(map[string]any{
		"process.pid": int64(100), "process.executable.name": "checkout",
		"service.name": "unknown_service:checkout", "host.name": "profiler-host",
	})
	b.Sample(p, t0.Add(1500*time.Millisecond), b.Thread(101)...) // 0: in run A
	b.Sample(p, t0.Add(2500*time.Millisecond), b.Thread(101)...) // 1: between A's last observation and B: unvouched
	b.Sample(p, t0.Add(3500*time.Millisecond), b.Thread(101)...) // 2: run B
	b.Sample(p, t0.Add(1500*time.Millisecond), b.Thread(102)...) // 3: thread never observed
	b.Sample(p, t0.Add(1500*time.Millisecond))                   // 4: no thread.id
	own := b.Sample(p, t0.Add(1500*time.Millisecond), b.Thread(103)...)
	own.SetLinkIndex(other) // 5: has a link of its own
	tenant := b.Attr("tenant", "from-sample")
	b.Sample(p, t0.Add(1500*time.Millisecond), append(b.Thread(101), tenant)...) // 6: own tenant wins

	h := newHarness(t, c, testPolicy())
	out := h.run(b.PD)

	res := out.ResourceProfiles().At(0).Resource().Attributes().AsRaw()
	want := map[string]any{
		"process.pid": int64(100), "process.executable.name": "checkout",
		"service.name": "checkout", "service.version": "1.4.2", "service.instance.id": "inst-checkout",
		"deployment.environment.name": "prod", "telemetry.sdk.language": "go",
		"host.name": "profiler-host", // the profiler's host.* is kept
		"team":      "payments",      // other keys: inserted when absent
	}
	for k, v := range want {
		if res[k] != v {
			t.Errorf("resource %s = %v, want %v", k, res[k], v)
		}
	}
	s0 := sampleAt(out, 0, 0)
	if s0.LinkIndex() != existingLink {
		t.Errorf("sample 0 link %d, want the existing equal link %d", s0.LinkIndex(), existingLink)
	}
	if a := sampleAttrs(t, out, s0); a["http.route"] != "/pay" || a["tenant"] != "acme" {
		t.Errorf("sample 0 attributes %v", a)
	}
	if !containsIdx(s0.AttributeIndices(), existingRoute) {
		t.Error("sample 0 did not reuse the existing http.route=/pay entry")
	}
	if sampleAt(out, 0, 1).LinkIndex() != 0 {
		t.Error("sample 1 (between observations of two records) linked")
	}
	tr, sp := sampleLink(out, sampleAt(out, 0, 2))
	if tr != (pcommon.TraceID{0xb, 0xb, 0xb, 0xb}) || sp != (pcommon.SpanID{0x2, 0x2}) {
		t.Errorf("sample 2 link %v %v, want run B's", tr, sp)
	}
	if a := sampleAttrs(t, out, sampleAt(out, 0, 2)); a["http.route"] != "/refund" {
		t.Errorf("sample 2 attributes %v", a)
	}
	for _, i := range []int{3, 4} {
		if s := sampleAt(out, 0, i); s.LinkIndex() != 0 || s.AttributeIndices().Len() != sampleAt(b.PD, 0, i).AttributeIndices().Len() {
			t.Errorf("sample %d changed", i)
		}
	}
	if sampleAt(out, 0, 5).LinkIndex() != other {
		t.Error("sample 5 lost its own link (override_links is false)")
	}
	if a := sampleAttrs(t, out, sampleAt(out, 0, 6)); a["tenant"] != "from-sample" || a["http.route"] != "/pay" {
		t.Errorf("sample 6 attributes %v", a)
	}
	if n := h.cnt.Enriched; n != 4 {
		t.Errorf("enriched %d, want 4", n)
	}
	if n := h.unmatched("stale"); n != 1 {
		t.Errorf("stale %d, want 1", n)
	}
	if n := h.unmatched("unknown_thread"); n != 1 {
		t.Errorf("unknown_thread %d", n)
	}
	if n := h.unmatched("no_thread_id"); n != 1 {
		t.Errorf("no_thread_id %d", n)
	}
	if n := h.cnt.Joined; n != 1 {
		t.Errorf("joined %d", n)
	}
	checkGolden(t, "single_process", out)

	// Idempotent: a second pass adds nothing to the tables.
	again := pprofile.NewProfiles()
	out.CopyTo(again)
	out2 := h.run(again)
	if out2.Dictionary().AttributeTable().Len() != out.Dictionary().AttributeTable().Len() ||
		out2.Dictionary().LinkTable().Len() != out.Dictionary().LinkTable().Len() ||
		out2.Dictionary().StringTable().Len() != out.Dictionary().StringTable().Len() {
		t.Error("a second pass grew the dictionary")
	}
}

func containsIdx(s pcommon.Int32Slice, i int32) bool {
	for _, v := range s.All() {
		if v == i {
			return true
		}
	}
	return false
}

// TestOverrideLinks: with override_links the record's link replaces the
// sample's.
func TestOverrideLinks(t *testing.T) {
	c := testCatalog(t)
	addCheckout(c, 100, t0)
	observe(t, c, 100, 101, span(100, 101, 0xa, 0x1, t0, nil), t0, t0.Add(2*time.Millisecond))
	b := newProfBuilder()
	other := b.Link(0xe, 0xe)
	p := b.Resource(map[string]any{"process.pid": int64(100)})
	b.Sample(p, t0.Add(time.Millisecond), b.Thread(101)...).SetLinkIndex(other)
	cfg := testPolicy()
	cfg.OverrideLinks = true
	out := newHarness(t, c, cfg).run(b.PD)
	if tr, _ := sampleLink(out, sampleAt(out, 0, 0)); tr != (pcommon.TraceID{0xa, 0xa, 0xa, 0xa}) {
		t.Errorf("link not overridden: %v", tr)
	}
}

// TestMixedProcesses: a ResourceProfiles without process.pid whose samples
// name two processes is split into one per process; a sample naming none
// stays in the original.
func TestMixedProcesses(t *testing.T) {
	c := testCatalog(t)
	addCheckout(c, 100, t0)
	addProcess(c, 200, t0, "cart", strAttr("service.name", "cart"))
	observe(t, c, 100, 101, span(100, 101, 0xa, 0x1, t0, map[string]string{"http.route": "/pay"}), t0, t0.Add(time.Second))
	observe(t, c, 200, 201, span(200, 201, 0xd, 0x4, t0, map[string]string{"http.route": "/cart"}), t0, t0.Add(time.Second))

	b := newProfBuilder()
	p := b.Resource(map[string]any{"host.name": "profiler-host"})
	pid100, pid200 := b.Attr("process.pid", int64(100)), b.Attr("process.pid", int64(200))
	at := t0.Add(500 * time.Millisecond)
	b.Sample(p, at, append(b.Thread(101), pid100)...)
	b.Sample(p, at, append(b.Thread(201), pid200)...)
	b.Sample(p, at, b.Thread(999)...) // names no process
	b.Sample(p, at.Add(time.Millisecond), append(b.Thread(101), pid100)...)

	h := newHarness(t, c, testPolicy())
	out := h.run(b.PD)
	rps := out.ResourceProfiles()
	if rps.Len() != 3 {
		t.Fatalf("%d ResourceProfiles, want 3 (the pid-less rest, 100, 200)", rps.Len())
	}
	if _, ok := rps.At(0).Resource().Attributes().Get("process.pid"); ok || countSamples(rps.At(0)) != 1 {
		t.Error("the original should keep only the sample naming no process")
	}
	for i, want := range []struct {
		pid     int64
		service string
		n       int
		route   string
	}{{100, "checkout", 2, "/pay"}, {200, "cart", 1, "/cart"}} {
		r := rps.At(i + 1)
		a := r.Resource().Attributes().AsRaw()
		if a["process.pid"] != want.pid || a["service.name"] != want.service || a["host.name"] != "profiler-host" {
			t.Errorf("resource %d: %v", i+1, a)
		}
		if countSamples(r) != want.n {
			t.Errorf("pid %d: %d samples, want %d", want.pid, countSamples(r), want.n)
		}
		if sa := sampleAttrs(t, out, sampleAt(out, i+1, 0)); sa["http.route"] != want.route {
			t.Errorf("pid %d sample: %v", want.pid, sa)
		}
	}
	if n := h.cnt.ResourcesSplit; n != 1 {
		t.Errorf("split %d", n)
	}
	checkGolden(t, "mixed_processes", out)

	// All samples naming one process: no split, the resource gets the PID.
	b = newProfBuilder()
	p = b.Resource(nil)
	b.Sample(p, at, append(b.Thread(101), b.Attr("process.pid", int64(100)))...)
	out = h.run(b.PD)
	if out.ResourceProfiles().Len() != 1 || out.ResourceProfiles().At(0).Resource().Attributes().AsRaw()["service.name"] != "checkout" {
		t.Errorf("single-process samples: %v", out.ResourceProfiles().At(0).Resource().Attributes().AsRaw())
	}
}

// TestNoContext: a process that publishes nothing passes unchanged.
func TestNoContext(t *testing.T) {
	c := testCatalog(t)
	addCheckout(c, 100, t0)
	b := newProfBuilder()
	p := b.Resource(map[string]any{"process.pid": int64(300), "service.name": "other"})
	b.Sample(p, t0.Add(time.Second), b.Thread(301)...)
	in := pprofile.NewProfiles()
	b.PD.CopyTo(in)
	h := newHarness(t, c, testPolicy())
	out := h.run(b.PD)
	if err := compare(in, out); err != nil {
		t.Error(err)
	}
	if n := h.unmatched("no_process"); n != 1 {
		t.Errorf("no_process %d", n)
	}
	checkGolden(t, "no_context", out)
}

// TestStaleRecord: only observations that vouch for a sample are used: the
// same record on both sides of it, or an observation taken at a profiler's
// sample moment within match_window; anything else is counted, not
// guessed.
func TestStaleRecord(t *testing.T) {
	c := testCatalog(t)
	addCheckout(c, 100, t0)
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	a := span(100, 101, 0xa, 0x1, t0, nil)
	b1 := span(100, 101, 0xb, 0x2, t0, nil)
	// 101: A seen by the own sampler at 0 and 100 ms, then exactly (at a
	// profiler's samples) at 200 ms, B exactly at 202.5 ms, nothing at 300 ms
	// exactly, B again by the own sampler at 400 ms.
	observe(t, c, 100, 101, a, ms(0), ms(100))
	observeExact(t, c, 100, 101, a, ms(200))
	observeExact(t, c, 100, 101, b1, ms(202.5))
	observeExact(t, c, 100, 101, nil, ms(300))
	observe(t, c, 100, 101, b1, ms(400))
	// 102: B seen once by the own sampler.
	observe(t, c, 100, 102, span(100, 102, 0xb, 0x2, t0, nil), ms(10))
	cfg := testPolicy()
	bld := newProfBuilder()
	p := bld.Resource(map[string]any{"process.pid": int64(100)})
	for _, s := range []struct {
		at  float64
		tid int
	}{
		{50, 101},    // 0: A on both sides: A
		{200.1, 101}, // 1: 0.1 ms after the exact A: A
		{199.9, 101}, // 2: 0.1 ms before the exact A (clock skew): A
		{201.2, 101}, // 3: 1.2 ms after A, 1.3 ms before B: neither within the window, stale
		{202.1, 101}, // 4: 2.1 ms after A, 0.4 ms before B: B, the only one within the window
		{201.5, 101}, // 5: 1.5 ms after A and 1 ms before B: neither within the window, stale
		{250, 101},   // 6: 47.5 ms after B, 50 ms before "no record": stale
		{300.2, 101}, // 7: just after the exact "no record": no span
		{350, 101},   // 8: between "no record" (exact) and B (own sampler): stale
		{10.5, 102},  // 9: 0.5 ms after an own-sampler observation: not exact, stale
		{5, 103},     // 10: a thread never seen
	} {
		bld.Sample(p, ms(s.at), bld.Thread(s.tid)...)
	}
	h := newHarness(t, c, cfg)
	out := h.run(bld.PD)
	wantSpan := map[int]byte{0: 0x1, 1: 0x1, 2: 0x1, 4: 0x2}
	for i := range 11 {
		s := sampleAt(out, 0, i)
		_, sp := sampleLink(out, s)
		if want, ok := wantSpan[i]; ok != (s.LinkIndex() != 0) || (ok && sp[0] != want) {
			t.Errorf("sample %d: link %d span %v, want span %#x (linked %v)", i, s.LinkIndex(), sp, want, ok)
		}
	}
	for r, want := range map[string]int64{"stale": 5, "no_span": 1, "unknown_thread": 1} {
		if n := h.unmatched(r); n != want {
			t.Errorf("%s: %d, want %d", r, n, want)
		}
	}
	checkGolden(t, "stale_record", out)
}

// TestExactWindow: among the exact observations within match_window the
// nearest vouches, unless one of another record is less than twice as far
// (ambiguous); observations that are not exact are skipped, whatever they
// show: they are on our clock, not at the profiler's sample.
func TestExactWindow(t *testing.T) {
	c := testCatalog(t)
	addCheckout(c, 100, t0)
	us := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Microsecond) }
	a, b, x := span(100, 101, 0xa, 0x1, t0, nil), span(100, 101, 0xb, 0x2, t0, nil), span(100, 101, 0xc, 0x3, t0, nil)
	// 101: exact A at 10 ms, exact B at 10.3 ms.
	observeExact(t, c, 100, 101, a, us(10_000))
	observeExact(t, c, 100, 101, b, us(10_300))
	// 102: exact A at 10 ms (the sample's own capture), X seen by the own
	// sampler at 10.01 ms, exact B at 10.9 ms (the next sample's).
	observeExact(t, c, 100, 102, a, us(10_000))
	observe(t, c, 100, 102, x, us(10_010))
	observeExact(t, c, 100, 102, b, us(10_900))
	bld := newProfBuilder()
	p := bld.Resource(map[string]any{"process.pid": int64(100)})
	bld.Sample(p, us(10_140), bld.Thread(101)...) // 0: A 140 µs, B 160 µs: ambiguous
	bld.Sample(p, us(10_050), bld.Thread(101)...) // 1: A 50 µs, B 250 µs: A
	bld.Sample(p, us(10_050), bld.Thread(102)...) // 2: A 50 µs, X skipped, B 850 µs: A
	h := newHarness(t, c, testPolicy())
	out := h.run(bld.PD)
	if sampleAt(out, 0, 0).LinkIndex() != 0 {
		t.Error("an ambiguous sample was linked")
	}
	for _, i := range []int{1, 2} {
		if _, sp := sampleLink(out, sampleAt(out, 0, i)); sp[0] != 0x1 {
			t.Errorf("sample %d: span %v, want A's", i, sp)
		}
	}
	if n := h.unmatched("ambiguous"); n != 1 {
		t.Errorf("ambiguous %d, want 1", n)
	}
}

// TestAfterExit: samples that arrive after their process exited, taken
// while it lived, still get its context and spans; those taken after the
// exit do not.
func TestAfterExit(t *testing.T) {
	c := testCatalog(t)
	p := addCheckout(c, 100, t0)
	observeExact(t, c, 100, 101, span(100, 101, 0xa, 0x1, t0, nil), t0.Add(time.Second))
	c.Apply([]publisher.Event{{Kind: publisher.Lost, Process: p}})
	exited := time.Now()
	bld := newProfBuilder()
	r := bld.Resource(map[string]any{"process.pid": int64(100)})
	bld.Sample(r, t0.Add(time.Second+100*time.Microsecond), bld.Thread(101)...)
	h := newHarness(t, c, testPolicy())
	out := h.run(bld.PD)
	if v, _ := out.ResourceProfiles().At(0).Resource().Attributes().Get("service.name"); v.Str() != "checkout" {
		t.Errorf("service.name %q after exit", v.Str())
	}
	if sampleAt(out, 0, 0).LinkIndex() == 0 {
		t.Error("sample of an exited process not linked")
	}
	bld = newProfBuilder()
	r = bld.Resource(map[string]any{"process.pid": int64(100)})
	bld.Sample(r, exited.Add(time.Second), bld.Thread(101)...)
	out = h.run(bld.PD)
	if _, ok := out.ResourceProfiles().At(0).Resource().Attributes().Get("service.name"); ok {
		t.Error("a sample taken after the exit got the exited process's context")
	}
}

// TestPIDReuse: data older than the cataloged process, or whose resource
// names another executable, start time or service instance, is another
// program's: nothing is attached.
func TestPIDReuse(t *testing.T) {
	c := testCatalog(t)
	created := t0.Add(10 * time.Second)
	addCheckout(c, 100, created)
	observe(t, c, 100, 101, span(100, 101, 0xa, 0x1, created, map[string]string{"http.route": "/pay"}), created.Add(time.Second), created.Add(3*time.Second))
	h := newHarness(t, c, testPolicy())

	b := newProfBuilder()
	// A sample of the PID's previous holder, 5 s before checkout started.
	p := b.Resource(map[string]any{"process.pid": int64(100), "process.executable.name": "checkout"})
	b.Sample(p, t0.Add(5*time.Second), b.Thread(101)...)
	b.Sample(p, created.Add(2*time.Second), b.Thread(101)...)
	for _, attrs := range []map[string]any{
		{"process.pid": int64(100), "process.executable.path": "/usr/bin/postgres"},
		{"process.pid": int64(100), "process.executable.name": "postgres"},
		{"process.pid": int64(100), "process.creation.time": t0.Format(time.RFC3339Nano)},
		{"process.pid": int64(100), "service.instance.id": "someone-else"},
	} {
		b.Sample(b.Resource(attrs), created.Add(2*time.Second), b.Thread(101)...)
	}
	in := pprofile.NewProfiles()
	b.PD.CopyTo(in)
	out := h.run(b.PD)
	if err := compare(in, out); err != nil {
		t.Error(err)
	}
	if n := h.cnt.PIDReuse; n != 5 {
		t.Errorf("refusals %d, want 5", n)
	}
	checkGolden(t, "pid_reuse", out)

	// The same process, named consistently (comm-truncated name, the
	// start time to the tick), is joined.
	b = newProfBuilder()
	p = b.Resource(map[string]any{"process.pid": int64(100), "process.executable.path": "/usr/bin/checkout (deleted)",
		"process.creation.time": created.Add(5 * time.Millisecond).Format(time.RFC3339Nano)})
	b.Sample(p, created.Add(2*time.Second), b.Thread(101)...)
	if out := h.run(b.PD); sampleAt(out, 0, 0).LinkIndex() == 0 {
		t.Error("consistent resource not joined")
	}
}

// compare is CompareProfiles for tests that expect no change.
func compare(want, got pprofile.Profiles) error {
	return pprofiletestCompare(want, got)
}

// TestEmptyLinkTable: a message whose link table is empty (a sender that
// never links) gets the empty link at index 0 before the first real one.
func TestEmptyLinkTable(t *testing.T) {
	c := testCatalog(t)
	addCheckout(c, 100, t0)
	observe(t, c, 100, 101, span(100, 101, 0xa, 0x1, t0, map[string]string{"http.route": "/pay"}), t0, t0.Add(2*time.Millisecond))
	b := newProfBuilder()
	b.Dict.LinkTable().RemoveIf(func(pprofile.Link) bool { return true })
	p := b.Resource(map[string]any{"process.pid": int64(100)})
	b.Sample(p, t0.Add(time.Millisecond), b.Thread(101)...)
	out := newHarness(t, c, testPolicy()).run(b.PD)
	links := out.Dictionary().LinkTable()
	if links.Len() != 2 || !links.At(0).Equal(pprofile.NewLink()) || sampleAt(out, 0, 0).LinkIndex() != 1 {
		t.Errorf("links %d, sample link %d", links.Len(), sampleAt(out, 0, 0).LinkIndex())
	}
}

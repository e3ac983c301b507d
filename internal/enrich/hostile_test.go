// SPDX-License-Identifier: Apache-2.0

//go:build linux

package enrich

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/otelctx/otelctx/internal/catalog"
)

// sameSample reports whether two samples hold the same indices, values and
// timestamps.
func sameSample(a, b pprofile.Sample) bool {
	return a.StackIndex() == b.StackIndex() && a.LinkIndex() == b.LinkIndex() &&
		slices.Equal(a.AttributeIndices().AsRaw(), b.AttributeIndices().AsRaw()) &&
		slices.Equal(a.Values().AsRaw(), b.Values().AsRaw()) &&
		slices.Equal(a.TimestampsUnixNano().AsRaw(), b.TimestampsUnixNano().AsRaw())
}

// TestManyPIDs: samples naming PIDs the catalog does not hold stay where
// they are, untouched, however many PIDs they name; only the samples of a
// cataloged process move to a copy of their own (one, whichever attribute
// entries name the PID), and a group whose data predates its PID's holder
// stays too (pid_reuse).
func TestManyPIDs(t *testing.T) {
	c := testCatalog(t)
	addCheckout(c, 100, t0)
	addProcess(c, 200, t0.Add(time.Hour), "late", strAttr("service.name", "late"))
	observe(t, c, 100, 101, span(100, 101, 0xa, 0x1, t0, map[string]string{"http.route": "/pay"}), t0, t0.Add(time.Second))

	b := newProfBuilder()
	p := b.Resource(map[string]any{"host.name": "profiler-host"})
	at := t0.Add(500 * time.Millisecond)
	const unknown = 300
	// Above the largest pid_max (2^22): no process of the host can hold
	// them while the environment source looks them up.
	const absent = 1 << 22
	for i := range unknown {
		b.Sample(p, at, b.Attr("thread.id", int64(7)), b.Attr("process.pid", int64(absent+i)))
	}
	b.Sample(p, at, append(b.Thread(101), b.Attr("process.pid", int64(100)))...)
	b.Sample(p, at, append(b.Thread(101), b.Attr("process.pid", "100"))...) // the same process, another entry
	b.Sample(p, at, b.Thread(999)...)                                       // names no process
	b.Sample(p, at, b.Attr("thread.id", int64(201)), b.Attr("process.pid", int64(200)))
	in := pprofile.NewProfiles()
	b.PD.CopyTo(in)

	h := newHarness(t, c, testPolicy())
	out := h.run(b.PD)
	rps := out.ResourceProfiles()
	if rps.Len() != 2 {
		t.Fatalf("%d ResourceProfiles, want 2 (the original, process 100)", rps.Len())
	}
	kept := rps.At(0).ScopeProfiles().At(0).Profiles().At(0).Samples()
	orig := in.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples()
	if kept.Len() != unknown+2 {
		t.Fatalf("the original keeps %d samples, want %d", kept.Len(), unknown+2)
	}
	for i := range kept.Len() {
		j := i
		if i >= unknown {
			j = i + 2 // the two samples of 100 moved
		}
		if !sameSample(kept.At(i), orig.At(j)) {
			t.Errorf("kept sample %d changed", i)
		}
	}
	if _, ok := rps.At(0).Resource().Attributes().Get("process.pid"); ok {
		t.Error("the original got a process.pid")
	}
	moved := rps.At(1)
	if a := moved.Resource().Attributes().AsRaw(); a["process.pid"] != int64(100) || a["service.name"] != "checkout" || countSamples(moved) != 2 {
		t.Errorf("process 100's copy: %v, %d samples", a, countSamples(moved))
	}
	// The environment source looks up DefaultEnvLookups of the unknown PIDs;
	// the rest are over the message's budget.
	looked := int64(min(unknown, catalog.DefaultEnvLookups))
	for r, want := range map[string]int64{"no_process": looked + 1, "pid_reuse": 1, "lookup_budget": unknown - looked} {
		if n := h.unmatched(r); n != want {
			t.Errorf("samples_unmatched{%s} = %d, want %d", r, n, want)
		}
	}
	for r, want := range map[string]int64{"no_process": looked, "no_pid": 1, "lookup_budget": unknown - looked} {
		if n := h.resourcesUnmatched(r); n != want {
			t.Errorf("resources_unmatched{%s} = %d, want %d", r, n, want)
		}
	}
	if n := h.cnt.Enriched; n != 2 {
		t.Errorf("enriched %d, want 2", n)
	}
	if n := h.cnt.PIDReuse; n != 1 {
		t.Errorf("pid_reuse_refusals %d, want 1", n)
	}
}

// TestAlternatingTimestamps: a sample whose timestamps alternate between
// two spans of its thread becomes two samples, one per span, each with its
// timestamps and values in their order (not one sample per timestamp).
func TestAlternatingTimestamps(t *testing.T) {
	c := testCatalog(t)
	const n = 1000
	in := alternatingMessage(t, c, n)
	orig := pprofile.NewProfiles()
	in.CopyTo(orig)
	s := in.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0)
	vals := s.Values().AsRaw()
	for j := range vals {
		vals[j] = int64(j)
	}
	s.Values().FromRaw(vals)
	in.CopyTo(orig)

	h := newHarness(t, c, testPolicy())
	out := h.run(in)
	samples := out.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples()
	if samples.Len() != 2 {
		t.Fatalf("%d samples, want 2", samples.Len())
	}
	ts := orig.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).TimestampsUnixNano().AsRaw()
	for k, span := range []byte{0x1, 0x2} {
		s := samples.At(k)
		if _, sp := sampleLink(out, s); sp[0] != span {
			t.Errorf("sample %d: span %x, want %x", k, sp[0], span)
		}
		got, gotVals := s.TimestampsUnixNano().AsRaw(), s.Values().AsRaw()
		if len(got) != n/2 || len(gotVals) != n/2 {
			t.Fatalf("sample %d: %d timestamps, %d values", k, len(got), len(gotVals))
		}
		for i := range got {
			if j := 2*i + k; got[i] != ts[j] || gotVals[i] != int64(j) {
				t.Fatalf("sample %d, timestamp %d: %d (value %d), want %d (%d)", k, i, got[i], gotVals[i], ts[j], j)
			}
		}
	}
	if n := h.cnt.SamplesSplit; n != 1 {
		t.Errorf("samples_split %d", n)
	}
}

// spoilers make a sample invalid in one way each, and name the reason it
// is counted under.
var spoilers = map[string]func(b *profBuilder, s pprofile.Sample){
	"attribute_index": func(_ *profBuilder, s pprofile.Sample) { s.AttributeIndices().Append(1 << 20) },
	"attribute_index/negative": func(_ *profBuilder, s pprofile.Sample) {
		s.AttributeIndices().Append(-3)
	},
	"string_index": func(b *profBuilder, s pprofile.Sample) {
		kv := b.Dict.AttributeTable().AppendEmpty()
		kv.SetKeyStrindex(1 << 20)
		kv.Value().SetStr("x")
		s.AttributeIndices().Append(int32(b.Dict.AttributeTable().Len() - 1))
	},
	"link_index":  func(_ *profBuilder, s pprofile.Sample) { s.SetLinkIndex(1 << 20) },
	"stack_index": func(_ *profBuilder, s pprofile.Sample) { s.SetStackIndex(-1) },
	"location_index": func(b *profBuilder, s pprofile.Sample) {
		b.Dict.StackTable().AppendEmpty().LocationIndices().Append(1, 1<<20)
		s.SetStackIndex(int32(b.Dict.StackTable().Len() - 1))
	},
	"mapping_index": func(b *profBuilder, s pprofile.Sample) {
		b.Dict.LocationTable().AppendEmpty().SetMappingIndex(1 << 20)
		b.Dict.StackTable().AppendEmpty().LocationIndices().Append(int32(b.Dict.LocationTable().Len() - 1))
		s.SetStackIndex(int32(b.Dict.StackTable().Len() - 1))
	},
	"function_index": func(b *profBuilder, s pprofile.Sample) {
		b.Dict.LocationTable().AppendEmpty().Lines().AppendEmpty().SetFunctionIndex(-7)
		b.Dict.StackTable().AppendEmpty().LocationIndices().Append(int32(b.Dict.LocationTable().Len() - 1))
		s.SetStackIndex(int32(b.Dict.StackTable().Len() - 1))
	},
	"timestamp": func(_ *profBuilder, s pprofile.Sample) {
		s.TimestampsUnixNano().Append(math.MaxInt64 + 1)
		s.Values().Append(1)
	},
}

// TestInvalidSamples: a sample holding an index outside its table (or
// whose stack does), or a timestamp no int64 of Unix ns holds, passes
// through untouched and is counted by reason, in a resource with
// process.pid or one split by its samples' PIDs; the valid samples next to
// it are joined as usual.
func TestInvalidSamples(t *testing.T) {
	c := testCatalog(t)
	addCheckout(c, 100, t0)
	addProcess(c, 200, t0, "cart", strAttr("service.name", "cart"))
	observe(t, c, 100, 101, span(100, 101, 0xa, 0x1, t0, map[string]string{"http.route": "/pay"}), t0, t0.Add(time.Second))
	observe(t, c, 200, 201, span(200, 201, 0xb, 0x2, t0, nil), t0, t0.Add(time.Second))
	at := t0.Add(500 * time.Millisecond)
	for name, spoil := range spoilers {
		for _, split := range []bool{false, true} {
			b := newProfBuilder()
			var p pprofile.Profile
			var bad pprofile.Sample
			if split {
				p = b.Resource(map[string]any{"host.name": "h"})
				b.Sample(p, at, append(b.Thread(201), b.Attr("process.pid", int64(200)))...)
				bad = b.Sample(p, at, append(b.Thread(101), b.Attr("process.pid", int64(100)))...)
			} else {
				p = b.Resource(map[string]any{"process.pid": int64(100)})
				b.Sample(p, at, b.Thread(101)...)
				bad = b.Sample(p, at, b.Thread(101)...)
			}
			spoil(b, bad)
			want := pprofile.NewSample()
			bad.CopyTo(want)

			h := newHarness(t, c, testPolicy())
			h.consume(b.PD)
			out := b.PD
			// The invalid sample stays in the original's profile: second,
			// or alone once the valid one moved.
			i := 1
			if split {
				i = 0
			}
			if got := sampleAt(out, 0, i); !sameSample(got, want) {
				t.Errorf("%s (split %v): the invalid sample changed", name, split)
			}
			reason, _, _ := strings.Cut(name, "/")
			if n := h.invalid(reason); n != 1 {
				t.Errorf("%s (split %v): samples_invalid{%s} = %d, want 1", name, split, reason, n)
			}
			if n := h.cnt.Enriched; n != 1 {
				t.Errorf("%s (split %v): %d enriched, want the valid sample", name, split, n)
			}
		}
	}
}

// TestResourcesOfOneProcess: ResourceProfiles of the same process share
// its threads' histories (copied once per message, for the span of all
// their samples), and each sample still gets the record of its own time.
func TestResourcesOfOneProcess(t *testing.T) {
	c := testCatalog(t)
	addCheckout(c, 100, t0)
	observe(t, c, 100, 101, span(100, 101, 0xa, 0x1, t0, nil), t0, t0.Add(time.Second))
	observe(t, c, 100, 101, span(100, 101, 0xb, 0x2, t0, nil), t0.Add(2*time.Second), t0.Add(3*time.Second))
	observe(t, c, 100, 101, span(100, 101, 0xc, 0x3, t0, nil), t0.Add(4*time.Second), t0.Add(5*time.Second))
	b := newProfBuilder()
	th := b.Thread(101)
	// The first one's span alone reaches span B at most: the second's
	// needs C.
	for _, at := range []time.Duration{500 * time.Millisecond, 4500 * time.Millisecond, 1500 * time.Millisecond} {
		b.Sample(b.Resource(map[string]any{"process.pid": int64(100)}), t0.Add(at), th...)
	}
	h := newHarness(t, c, testPolicy())
	out := h.run(b.PD)
	for r, want := range []byte{0x1, 0x3, 0} {
		s := sampleAt(out, r, 0)
		if _, sp := sampleLink(out, s); sp[0] != want {
			t.Errorf("resource %d: span %x, want %x", r, sp[0], want)
		}
	}
	if n := h.unmatched("stale"); n != 1 {
		t.Errorf("stale %d, want 1 (between the spans)", n)
	}
}

// TestInvalidUTF8: published resource attributes and thread-record
// attributes reach pdata as valid UTF-8, whichever reader put them in the
// catalog.
func TestInvalidUTF8(t *testing.T) {
	c := testCatalog(t)
	addProcess(c, 100, t0, "checkout", strAttr("service.name", "pay\xffment"), strAttr("team\xfe", "ok"))
	observe(t, c, 100, 101, span(100, 101, 0xa, 0x1, t0, map[string]string{"route\xc3": "/p\xffy"}), t0, t0.Add(time.Second))
	b := newProfBuilder()
	b.Sample(b.Resource(map[string]any{"process.pid": int64(100)}), t0.Add(500*time.Millisecond), b.Thread(101)...)
	h := newHarness(t, c, testPolicy())
	out := h.run(b.PD)
	res := out.ResourceProfiles().At(0).Resource().Attributes()
	for k, v := range res.All() {
		if !utf8.ValidString(k) || !utf8.ValidString(v.AsString()) {
			t.Errorf("resource attribute %q=%q", k, v.AsString())
		}
	}
	if v, _ := res.Get("service.name"); v.Str() != "pay\uFFFDment" {
		t.Errorf("service.name %q", v.Str())
	}
	for i, s := range out.Dictionary().StringTable().All() {
		if !utf8.ValidString(s) {
			t.Errorf("string %d: %q", i, s)
		}
	}
	for k, v := range sampleAttrs(t, out, sampleAt(out, 0, 0)) {
		if !utf8.ValidString(k) || !utf8.ValidString(fmt.Sprint(v)) {
			t.Errorf("sample attribute %q=%q", k, v)
		}
	}
}

// TestSplitCopiesBounded: a profile's split-off copies do not get its
// original payload (only the original keeps it), and what copies do get
// (resource, scope, profile metadata) is bounded by the message's size:
// past it, splitting stops and the remaining samples stay unjoined
// (split_budget). One sample per cataloged PID must not multiply a large
// profile or resource by the number of PIDs; a small message of many
// processes still splits whole.
func TestSplitCopiesBounded(t *testing.T) {
	const pids, big = 64, 4 << 20
	for _, where := range []string{"none", "original_payload", "resource", "profile_attributes"} {
		t.Run(where, func(t *testing.T) {
			c := testCatalog(t)
			b := newProfBuilder()
			res := map[string]any{"host.name": "profiler-host"}
			if where == "resource" {
				res["padding"] = strings.Repeat("x", big)
			}
			p := b.Resource(res)
			switch where {
			case "original_payload":
				p.SetOriginalPayloadFormat("pprof")
				p.OriginalPayload().FromRaw(make([]byte, big))
			case "profile_attributes":
				a := b.Attr("padding", "x")
				for range big / 8 {
					p.AttributeIndices().Append(a)
				}
			}
			at := t0.Add(500 * time.Millisecond)
			for i := range pids {
				addProcess(c, 1000+i, t0, fmt.Sprintf("p%d", i))
				b.Sample(p, at, b.Attr("thread.id", int64(7)), b.Attr("process.pid", int64(1000+i)))
			}
			var m pprofile.ProtoMarshaler
			inSize := m.ProfilesSize(b.PD)

			h := newHarness(t, c, testPolicy())
			out := h.run(b.PD)
			if outSize := m.ProfilesSize(out); outSize > 2*inSize+minSplitBudget {
				t.Fatalf("%d bytes in, %d out (%d ResourceProfiles)", inSize, outSize, out.ResourceProfiles().Len())
			}
			t.Logf("%d bytes in, %d out, %d ResourceProfiles", inSize, m.ProfilesSize(out), out.ResourceProfiles().Len())
			kept, originals, budget := 0, 0, h.unmatched("split_budget")
			for i := range out.ResourceProfiles().Len() {
				rp := out.ResourceProfiles().At(i)
				prof := rp.ScopeProfiles().At(0).Profiles().At(0)
				if _, ok := rp.Resource().Attributes().Get("process.pid"); !ok {
					originals++
					kept += prof.Samples().Len()
					if where == "original_payload" && (prof.OriginalPayload().Len() != big || prof.OriginalPayloadFormat() != "pprof") {
						t.Error("the original lost its payload")
					}
				} else if prof.OriginalPayload().Len() != 0 || prof.OriginalPayloadFormat() != "" {
					t.Errorf("copy %d got the original payload", i)
				}
			}
			want := 1 // the original stays for its payload or samples
			if where == "none" {
				want = 0 // every sample moved
			}
			if originals != want {
				t.Errorf("%d originals out, want %d", originals, want)
			}
			if int64(kept) != budget {
				t.Errorf("%d samples stay in the original, split_budget counts %d", kept, budget)
			}
			small := where == "none" || where == "original_payload"
			if small && kept != 0 {
				t.Errorf("%d samples stayed: copies of a few hundred bytes each should not stop the split", kept)
			}
			if !small && kept == 0 {
				t.Error("every sample moved: the split was not bounded")
			}
		})
	}
}

// TestManyKeysMerge: a record of 100 keys joined onto samples that carry
// some of those keys themselves (past smallMerge pairs: the marking merge),
// one of them through a second, equal string of the key: each sample keeps
// its own values, gets each other key once, and nothing else changes.
func TestManyKeysMerge(t *testing.T) {
	c := testCatalog(t)
	addCheckout(c, 100, t0)
	attrs := map[string]string{}
	for i := range 100 {
		attrs[fmt.Sprintf("key%02d", i)] = "record"
	}
	observe(t, c, 100, 101, span(100, 101, 0xa, 0x1, t0, attrs), t0, t0.Add(time.Second))

	b := newProfBuilder()
	p := b.Resource(map[string]any{"process.pid": int64(100)})
	own := []int32{b.Attr("key00", "own"), b.Attr("key50", "own")}
	// key99 by a duplicate string: the table already has "key99" once.
	b.Str("key99")
	strs, table := b.Dict.StringTable(), b.Dict.AttributeTable()
	strs.Append("key99")
	kv := table.AppendEmpty()
	kv.SetKeyStrindex(int32(strs.Len() - 1))
	kv.Value().SetStr("own")
	own = append(own, int32(table.Len()-1))
	for i := range 30 {
		own = append(own, b.Attr(fmt.Sprintf("sample%02d", i), "own"))
	}
	at := t0.Add(500 * time.Millisecond)
	b.Sample(p, at, append(b.Thread(101), own...)...)
	b.Sample(p, at, b.Thread(101)...) // no own keys: gets all 100

	out := newHarness(t, c, testPolicy()).run(b.PD)
	d := out.Dictionary()
	samples := out.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples()
	for i, want := range []struct{ n, own int }{{2 + 33 + 97, 33}, {2 + 100, 0}} {
		got := map[string]string{}
		nOwn := 0
		for _, ai := range samples.At(i).AttributeIndices().All() {
			kv := d.AttributeTable().At(int(ai))
			k := d.StringTable().At(int(kv.KeyStrindex()))
			if _, dup := got[k]; dup {
				t.Errorf("sample %d: key %q twice", i, k)
			}
			got[k] = kv.Value().AsString()
			if got[k] == "own" {
				nOwn++
			}
		}
		if len(got) != want.n || nOwn != want.own {
			t.Errorf("sample %d: %d keys (%d own values), want %d (%d)", i, len(got), nOwn, want.n, want.own)
		}
		for k := range attrs {
			if got[k] == "" {
				t.Errorf("sample %d lacks %s", i, k)
			}
		}
	}
}

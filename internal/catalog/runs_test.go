// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"slices"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/publisher"
)

func TestAppendRunsAndSortedAttributes(t *testing.T) {
	c := New()
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(7, 1)}})
	t0 := time.Unix(100, 0)
	a := rec(7, 8, 1, t0)
	a.Attributes = map[string]string{"z": "1", "a": "2", "m": "3"}
	b := rec(7, 8, 2, t0.Add(time.Second))
	b.Attributes = nil
	if !c.observePID(7, 8, t0, a) || !c.observePID(7, 8, t0.Add(500*time.Millisecond), a) || !c.observePID(7, 8, t0.Add(time.Second), b) {
		t.Fatal("observation dropped")
	}
	want := []Attribute{{"a", "2"}, {"m", "3"}, {"z", "1"}}
	if got := a.SortedAttributes(); !slices.Equal(got, want) {
		t.Errorf("SortedAttributes = %v, want %v", got, want)
	}
	if got := b.SortedAttributes(); got != nil {
		t.Errorf("SortedAttributes of a record without attributes = %v", got)
	}

	ra := Run{Record: a, First: t0.UnixNano(), Last: t0.Add(500 * time.Millisecond).UnixNano()}
	rb := Run{Record: b, First: t0.Add(time.Second).UnixNano(), Last: t0.Add(time.Second).UnixNano()}
	ns := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	for _, tc := range []struct {
		name     string
		from, to int64
		want     []Run
	}{
		{"all", ns(-time.Hour), ns(time.Hour), []Run{{}, ra, rb}},
		{"before the history", ns(-time.Hour), ns(-time.Second), []Run{{}, ra}},
		{"in the first run", ns(100 * time.Millisecond), ns(200 * time.Millisecond), []Run{{}, ra, rb}},
		{"from the first run on", ns(700 * time.Millisecond), ns(time.Hour), []Run{{}, ra, rb}},
		{"at the second run", ns(time.Second), ns(time.Second), []Run{{}, rb}},
		{"after the last run", ns(time.Hour), ns(2 * time.Hour), []Run{{}, rb}},
	} {
		dst := make([]Run, 1, 8) // appended to, not overwritten
		if got := c.AppendRuns(dst, proc(7, 1).ID, 8, tc.from, tc.to); !slices.Equal(got, tc.want) {
			t.Errorf("%s: AppendRuns = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if got := c.AppendRuns(nil, proc(7, 1).ID, 9, 0, ns(time.Hour)); got != nil {
		t.Errorf("AppendRuns of an unknown thread = %v", got)
	}
}

// TestDefaultHistoryCoversReportDelay: with the default bounds, a thread
// that switched spans every 10 ms for 5 s (a profiler's report interval)
// still has the span of the first sample of the report.
func TestDefaultHistoryCoversReportDelay(t *testing.T) {
	c := New()
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(7, 1)}})
	t0 := time.Unix(100, 0)
	const spans = 500
	for i := range spans {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		r := rec(7, 8, byte(i), at)
		r.Record.SpanID[1] = byte(i >> 8)
		if !c.observePID(7, 8, at, r) {
			t.Fatalf("observation %d dropped", i)
		}
	}
	r, _, ok := c.ThreadAt(7, 8, t0.Add(5*time.Millisecond))
	if !ok || r == nil || r.Record.SpanID[0] != 0 || r.Record.SpanID[1] != 0 {
		t.Fatalf("ThreadAt 5 s back = %+v, %v: the history does not reach back one report interval", r, ok)
	}
}

// TestSortedAttributesShared: records with equal attributes share one
// sorted slice (the processor resolves each set once per message); records
// with other attributes, or whose keys and values only concatenate alike,
// do not.
func TestSortedAttributesShared(t *testing.T) {
	c := New()
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: proc(7, 1)}})
	t0 := time.Unix(100, 0)
	mk := func(tid int, attrs map[string]string) *ThreadRecord {
		r := rec(7, tid, byte(tid), t0)
		r.Attributes = attrs
		if !c.observePID(7, tid, t0, r) {
			t.Fatal("observation dropped")
		}
		return r
	}
	a := mk(1, map[string]string{"http.route": "/a", "method": "GET"})
	b := mk(2, map[string]string{"method": "GET", "http.route": "/a"})
	other := mk(3, map[string]string{"http.route": "/b", "method": "GET"})
	tricky := mk(4, map[string]string{"http.route": "/aGET", "metho": "d"})
	sa, sb := a.SortedAttributes(), b.SortedAttributes()
	if len(sa) != 2 || &sa[0] != &sb[0] {
		t.Errorf("equal attributes not shared: %v %v", sa, sb)
	}
	if &other.SortedAttributes()[0] == &sa[0] || &tricky.SortedAttributes()[0] == &sa[0] {
		t.Error("different attributes share a slice")
	}
}

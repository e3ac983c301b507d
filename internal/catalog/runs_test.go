package catalog

import (
	"slices"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/scan"
)

func TestAppendRunsAndSortedAttributes(t *testing.T) {
	c := New()
	c.Apply([]scan.Event{{Kind: scan.Found, Process: proc(7, 1)}})
	t0 := time.Unix(100, 0)
	a := rec(7, 8, 1, t0)
	a.Attributes = map[string]string{"z": "1", "a": "2", "m": "3"}
	b := rec(7, 8, 2, t0.Add(time.Second))
	b.Attributes = nil
	if !c.Observe(7, 8, t0, a) || !c.Observe(7, 8, t0.Add(500*time.Millisecond), a) || !c.Observe(7, 8, t0.Add(time.Second), b) {
		t.Fatal("observation dropped")
	}
	want := []Attribute{{"a", "2"}, {"m", "3"}, {"z", "1"}}
	if got := a.SortedAttributes(); !slices.Equal(got, want) {
		t.Errorf("SortedAttributes = %v, want %v", got, want)
	}
	if got := b.SortedAttributes(); got != nil {
		t.Errorf("SortedAttributes of a record without attributes = %v", got)
	}

	dst := make([]Run, 1, 8) // appended to, not overwritten
	dst = c.AppendRuns(dst, 7, 8)
	wantRuns := []Run{{}, {Record: a, First: t0.UnixNano(), Last: t0.Add(500 * time.Millisecond).UnixNano()},
		{Record: b, First: t0.Add(time.Second).UnixNano(), Last: t0.Add(time.Second).UnixNano()}}
	if !slices.Equal(dst, wantRuns) {
		t.Errorf("AppendRuns = %+v, want %+v", dst, wantRuns)
	}
	if got := c.AppendRuns(nil, 7, 9); got != nil {
		t.Errorf("AppendRuns of an unknown thread = %v", got)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package catalog

import (
	"math"
	"testing"

	"github.com/otelctx/otelctx/internal/format/threadctx"
)

func TestCursorRunAt(t *testing.T) {
	a := &ThreadRecord{Record: threadctx.Record{SpanID: [8]byte{1}}}
	a2 := &ThreadRecord{Record: threadctx.Record{SpanID: [8]byte{1}}} // same content as a, another read
	b := &ThreadRecord{Record: threadctx.Record{SpanID: [8]byte{2}}}
	const w = 500
	for _, tc := range []struct {
		name string
		runs []Run
		t    int64
		want int
		miss Miss
	}{
		{"no history", nil, 10, -1, UnknownThread},
		{"bracketed", []Run{{Record: a, First: 100, Last: 200}}, 150, 0, Vouched},
		{"bracketed, no record", []Run{{Record: nil, First: 100, Last: 200}}, 150, -1, NoSpan},
		{"after a run on our clock", []Run{{Record: a, First: 100, Last: 200}}, 250, -1, Stale},
		{"before a run on our clock", []Run{{Record: a, First: 100, Last: 200}}, 50, -1, Stale},
		{"a wrapped timestamp past 2262", []Run{{Record: a, First: 100, Last: 200, FirstExact: true}}, math.MinInt64 + 50, -1, Stale},
		{"exact last within the window", []Run{{Record: a, First: 100, Last: 200, LastExact: true}}, 650, 0, Vouched},
		{"exact last beyond the window", []Run{{Record: a, First: 100, Last: 200, LastExact: true}}, 701, -1, Stale},
		{"exact first just after", []Run{{Record: a, First: 100, Last: 200, FirstExact: true}}, 90, 0, Vouched},
		{"nearest exact wins", []Run{
			{Record: a, First: 100, Last: 100, LastExact: true},
			{Record: b, First: 400, Last: 400, FirstExact: true},
		}, 110, 0, Vouched},
		{"another record less than twice as far", []Run{
			{Record: a, First: 100, Last: 100, LastExact: true},
			{Record: b, First: 260, Last: 260, FirstExact: true},
		}, 200, -1, Ambiguous},
		{"another record twice as far", []Run{
			{Record: a, First: 100, Last: 100, LastExact: true},
			{Record: b, First: 250, Last: 250, FirstExact: true},
		}, 200, 1, Vouched},
		{"the same content twice is not ambiguous", []Run{
			{Record: a, First: 100, Last: 100, LastExact: true},
			{Record: a2, First: 250, Last: 250, FirstExact: true},
		}, 200, 1, Vouched},
		{"exact with no record", []Run{{Record: nil, First: 100, Last: 100, LastExact: true}}, 150, -1, NoSpan},
	} {
		c := NewCursor(tc.runs)
		if got, miss := c.RunAt(tc.t, w); got != tc.want || miss != tc.miss {
			t.Errorf("%s: RunAt(%d) = %d, %d; want %d, %d", tc.name, tc.t, got, miss, tc.want, tc.miss)
		}
	}
}

// TestCursorInOrderAndBack: the cursor's shortcut for in-order samples
// gives the same answers as a fresh search, including for a sample that
// goes back in time.
func TestCursorInOrderAndBack(t *testing.T) {
	runs := []Run{
		{Record: &ThreadRecord{Record: threadctx.Record{SpanID: [8]byte{1}}}, First: 100, Last: 200},
		{Record: &ThreadRecord{Record: threadctx.Record{SpanID: [8]byte{2}}}, First: 300, Last: 400},
		{Record: &ThreadRecord{Record: threadctx.Record{SpanID: [8]byte{3}}}, First: 500, Last: 600},
	}
	c := NewCursor(runs)
	for _, tt := range []int64{150, 350, 550, 120, 590, 380, 50, 250, 1000} {
		fresh := NewCursor(runs)
		gotI, gotM := c.RunAt(tt, 0)
		wantI, wantM := fresh.RunAt(tt, 0)
		if gotI != wantI || gotM != wantM {
			t.Errorf("RunAt(%d) after earlier lookups = %d, %d; fresh cursor = %d, %d", tt, gotI, gotM, wantI, wantM)
		}
	}
}

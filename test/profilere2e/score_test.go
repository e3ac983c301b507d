// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// A sample inside a span is judged against it; one in the gap between two
// spans (the worker preempted while replacing its record, still publishing
// the earlier span) is a boundary sample, whatever the gap's length.
func TestLocateGap(t *testing.T) {
	ms := int64(time.Millisecond)
	runs := []run{{ms: 10, truth: map[int64]threadpub.SwitchTruth{7: {
		Spans: []threadpub.Span{
			{Index: 0, SpanID: "a", RealStart: 0, RealEnd: 10 * ms},
			{Index: 1, SpanID: "b", RealStart: 37 * ms, RealEnd: 47 * ms}, // a 27 ms gap before it
		},
		DoneReal: 48 * ms,
	}}}}
	for _, tc := range []struct {
		ts       int64
		span     string
		boundary bool
		link     string
		right    bool
	}{
		{5 * ms, "a", false, "a", true},
		{5 * ms, "a", false, "b", false},
		{20 * ms, "a", true, "a", true}, // 10 ms after a's end: a is still published
		{20 * ms, "a", true, "b", false},
		{42 * ms, "b", false, "b", true},
	} {
		v := locate(runs, 7, tc.ts)
		if v.run != 0 || v.span == nil || v.span.SpanID != tc.span || v.boundary != tc.boundary {
			t.Errorf("at %d ms: %+v, want span %s, boundary %v", tc.ts/ms, v, tc.span, tc.boundary)
			continue
		}
		if c := judge(v, tc.link); (c.right == 1) != tc.right {
			t.Errorf("at %d ms, link %s: %+v", tc.ts/ms, tc.link, c)
		}
	}
	if v := locate(runs, 7, 60*ms); v.run != -1 {
		t.Errorf("after the run: %+v", v)
	}
}

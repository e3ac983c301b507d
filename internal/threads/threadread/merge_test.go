// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadread

import (
	"testing"

	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/publisher"
)

func TestMerge(t *testing.T) {
	rec := func(b byte) *threadctx.Record { return &threadctx.Record{SpanID: threadctx.SpanID{b}} }
	otep := []Thread{
		{TID: 1, Record: rec(1), Source: publisher.SourceOTEP4947},
		{TID: 2, Reason: ReasonNullPointer, Source: publisher.SourceOTEP4947, ThreadPointer: 0x22},
		{TID: 3, Reason: ReasonTimeout, Source: publisher.SourceOTEP4947},
		{TID: 4, Reason: ReasonNullPointer, Source: publisher.SourceOTEP4947},
		{TID: 5, Reason: ReasonNullPointer, Source: publisher.SourceOTEP4947},
		{TID: 7, Reason: ReasonNullPointer, Source: publisher.SourceOTEP4947},
	}
	dd := []Thread{
		{TID: 1, Record: rec(9), Source: publisher.SourceDD},
		{TID: 2, Record: rec(2), Source: publisher.SourceDD},
		{TID: 3, Reason: ReasonEmptySlot, Source: publisher.SourceDD},
		{TID: 4, Reason: ReasonTorn, Source: publisher.SourceDD},
		{TID: 5, Reason: ReasonEmptySlot, Source: publisher.SourceDD},
		{TID: 6, Record: rec(6), Source: publisher.SourceDD},
	}
	got := Merge(otep, dd)
	want := []struct {
		tid    int
		span   byte // 0: no record
		source string
		reason string
	}{
		{1, 1, publisher.SourceOTEP4947, ""},                // OTEP 4947 wins
		{2, 2, publisher.SourceDD, ""},                      // DD fills in
		{3, 0, publisher.SourceOTEP4947, ReasonTimeout},     // unread beats no context
		{4, 0, publisher.SourceDD, ReasonTorn},              // either way
		{5, 0, publisher.SourceOTEP4947, ReasonNullPointer}, // both none
		{7, 0, publisher.SourceOTEP4947, ReasonNullPointer}, // only one source knows it
		{6, 6, publisher.SourceDD, ""},
	}
	if len(got) != len(want) {
		t.Fatalf("%d threads: %+v", len(got), got)
	}
	for i, w := range want {
		g := got[i]
		span := byte(0)
		if g.Record != nil {
			span = g.Record.SpanID[0]
		}
		if g.TID != w.tid || span != w.span || g.Source != w.source || g.Reason != w.reason {
			t.Errorf("thread %d: %+v, want %+v", i, g, w)
		}
	}
	if got[1].ThreadPointer != 0x22 {
		t.Errorf("the stop's thread pointer is kept: %+v", got[1])
	}
	if len(Merge(nil, dd)) != len(dd) || len(Merge(otep, nil)) != len(otep) {
		t.Error("one source alone")
	}
}

// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// leafMessage: span 1 of one thread, one sample of counts[i] timestamps
// in function fn[i] each.
func leafMessage(fns []string, counts []int) pprofile.Profiles {
	b := newProfBuilder()
	p := b.profile(map[string]any{"service.name": "checkout"}, hz)
	for i, fn := range fns {
		b.sample(p, b.link(1, 1), b.stack(fn), ticks(t0, counts[i], hz), b.attr("thread.name", "worker"))
	}
	return b.pd
}

// TestSpanRecordLeafBound: a span record counts at most 32 distinct leaf
// functions, the first seen; the samples of any further leaf are counted
// together as (other), in the message that brings it and in later ones,
// while a leaf already counted goes on counting. Ties keep the order the
// leaves were first seen, (other) after them.
func TestSpanRecordLeafBound(t *testing.T) {
	cfg := defaultConfig()
	cfg.SpanRecords.TopFunctions = maxTopFunctions
	sink := new(consumertest.LogsSink)
	c := newLogs(t, cfg, sink)
	var fns []string
	var counts []int
	for i := range 40 {
		fns = append(fns, fmt.Sprintf("f%d", i))
		counts = append(counts, 1+2*(i/maxLeavesPerSpan)) // f0…f31 1 sample each, f32…f39 3
	}
	ctx := context.Background()
	if err := c.ConsumeProfiles(ctx, leafMessage(fns, counts)); err != nil {
		t.Fatal(err)
	}
	// The next message: f5 again (counted), f40 (past the bound), f31.
	if err := c.ConsumeProfiles(ctx, leafMessage([]string{"f40", "f5", "f31"}, []int{2, 10, 1})); err != nil {
		t.Fatal(err)
	}
	c.flush(ctx)
	_, lr, ok := record(sink.AllLogs()[0], 1)
	if !ok {
		t.Fatal("no record of span 1")
	}
	var got []string
	for _, f := range lr.Attributes().AsRaw()[AttrTopFunctions].([]any) {
		got = append(got, fmt.Sprintf("%v=%v", f.(map[string]any)["function"], f.(map[string]any)["samples"]))
	}
	want := []string{"(other)=26", "f5=11", "f31=2"}
	for i := range 18 {
		if i != 5 {
			want = append(want, fmt.Sprintf("f%d=1", i))
		}
	}
	want = want[:maxTopFunctions]
	if !reflect.DeepEqual(got, want) {
		t.Errorf("top functions\n got %v\nwant %v", got, want)
	}
	if n := lr.Attributes().AsRaw()[AttrSampleCount]; n != int64(32+8*3+13) {
		t.Errorf("%v samples, want every one counted", n)
	}
	// The next interval numbers its frames afresh.
	if err := c.ConsumeProfiles(ctx, leafMessage([]string{"g", "f1"}, []int{1, 4})); err != nil {
		t.Fatal(err)
	}
	c.flush(ctx)
	_, lr, _ = record(sink.AllLogs()[1], 1)
	top := lr.Attributes().AsRaw()[AttrTopFunctions].([]any)
	if len(top) != 2 || top[0].(map[string]any)["function"] != "f1" || top[1].(map[string]any)["function"] != "g" {
		t.Errorf("second interval's top functions %v", top)
	}
}

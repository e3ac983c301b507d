// SPDX-License-Identifier: Apache-2.0

package processctx_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"

	"github.com/otelctx/otelctx/internal/format/processctx"
)

// retained measures what n decodes of payload keep alive (heap bytes after
// a GC, per decode) and allocate in all (per decode).
func retained(t *testing.T, payload []byte, lim processctx.Limits) (kept, allocated int, ds processctx.DecodeStats, err error) {
	t.Helper()
	const n = 64
	out := make([]processctx.Context, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range out {
		out[i], ds, err = processctx.Decode(payload, lim)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(out)
	kept = int(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	return kept, int(after.TotalAlloc-before.TotalAlloc) / n, ds, err
}

// TestDecodedSizeBound: whatever its content, a decoded context keeps at
// most DecodedSizeMultiple times the payload limit alive, DecodedSize
// tells no less than it keeps, and a refused one allocates no more than
// the budget on its way.
func TestDecodedSizeBound(t *testing.T) {
	lim := processctx.DefaultLimits()
	budget := processctx.DecodedSizeMultiple * int(lim.MaxPayloadSize)
	// slack: what a decode allocates besides the context (its error, the
	// entity refs' size index) and the heap's rounding of a few objects.
	const slack = 8 << 10
	many := &resourcepb.Resource{}
	for i := range 128 {
		many.Attributes = append(many.Attributes, kv(fmt.Sprint("attribute.number.", i), sv(fmt.Sprint("value ", i))))
	}
	for _, tc := range []struct {
		name    string
		payload []byte
		refused bool
	}{
		{"realistic", realisticPayload(), false},
		{"all kinds", allKindsPayload(), false},
		{"key map 256", encodeContext(nil, kv(processctx.KeyAttributeKeyMap, strArr(keyMapNames(256)...))), false},
		{"128 attributes", encodeContext(many), false},
		{"nested, under the budget", nestedPayload(2, 8, 20, 0), false},
		// The payload: 63 KiB, 2 attributes of 128 arrays of 120
		// empty AnyValues (3.7 MB decoded before the budget).
		{"nested 2x128x120", nestedPayload(2, 128, 120, 0), true},
		// Few values, named by 128 entity references: 16 (one per type)
		// copies of them in every entity event.
		{"entity refs", nestedPayload(2, 16, 16, 128), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept, allocated, ds, err := retained(t, tc.payload, lim)
			t.Logf("payload %d bytes: keeps %d, allocates %d, DecodedSize %d, err %v", len(tc.payload), kept, allocated, ds.DecodedSize, err)
			if len(tc.payload) > int(lim.MaxPayloadSize) {
				t.Fatalf("payload of %d bytes: over the limit, the test means nothing", len(tc.payload))
			}
			if tc.refused {
				if !errors.Is(err, processctx.ErrBudget) {
					t.Fatalf("err = %v, want ErrBudget", err)
				}
				if allocated > budget+slack {
					t.Errorf("a refused context allocated %d bytes, over the budget %d", allocated, budget)
				}
				if kept > slack {
					t.Errorf("a refused context keeps %d bytes", kept)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if kept > budget {
				t.Errorf("keeps %d bytes, over the budget %d (%d× the payload limit)", kept, budget, processctx.DecodedSizeMultiple)
			}
			if kept > ds.DecodedSize+slack {
				t.Errorf("keeps %d bytes, DecodedSize says %d", kept, ds.DecodedSize)
			}
		})
	}
}

// TestEntityRefsDeduplicated: one reference per entity type, each key once,
// at most MaxEntityRefs.
func TestEntityRefsDeduplicated(t *testing.T) {
	r := &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("service.name", sv("a")), kv("k", sv("v"))}}
	for i := range 40 {
		r.EntityRefs = append(r.EntityRefs,
			&commonpb.EntityRef{Type: fmt.Sprint("type.", i), IdKeys: []string{"service.name", "service.name", "k"}, DescriptionKeys: []string{"k", "k"}},
			&commonpb.EntityRef{Type: fmt.Sprint("type.", i), IdKeys: []string{"k"}})
	}
	c, ds := decodeOK(t, encodeContext(r), processctx.DefaultLimits())
	if len(c.Resource.EntityRefs) != processctx.MaxEntityRefs {
		t.Fatalf("%d entity refs kept, want %d", len(c.Resource.EntityRefs), processctx.MaxEntityRefs)
	}
	for i, e := range c.Resource.EntityRefs {
		if e.Type != fmt.Sprint("type.", i) || len(e.IDKeys) != 2 || len(e.DescriptionKeys) != 1 {
			t.Fatalf("entity ref %d: %+v", i, e)
		}
	}
	// Once the bound is reached every reference is dropped (the last
	// kept type's repeat too); before it the repeated type and the
	// repeated keys are duplicates.
	wantDropped, wantDups := 2*(40-processctx.MaxEntityRefs)+1, 3*processctx.MaxEntityRefs-1
	if ds.DroppedAttributes != wantDropped || ds.DuplicateKeys != wantDups {
		t.Fatalf("stats %+v, want %d dropped and %d duplicates", ds, wantDropped, wantDups)
	}
}

// TestDecodeInvalidUTF8: every string that reaches a Context is valid
// UTF-8; invalid bytes become U+FFFD and each such string is counted.
func TestDecodeInvalidUTF8(t *testing.T) {
	c, ds := decodeOK(t, invalidUTF8Payload(), processctx.DefaultLimits())
	if ds.InvalidUTF8 != 7 {
		t.Errorf("InvalidUTF8 = %d, want 7", ds.InvalidUTF8)
	}
	if v, ok := processctx.Lookup(c.Resource.Attributes, "service.name\uFFFD"); !ok || v.Str != "ok\uFFFD" {
		t.Errorf("resource attributes %+v", c.Resource.Attributes)
	}
	if v, _ := processctx.Lookup(c.Resource.Attributes, "k"); len(v.KVList) != 1 || v.KVList[0].Key != "in\uFFFD" {
		t.Errorf("nested key %+v", v)
	}
	if e := c.Resource.EntityRefs; len(e) != 1 || e[0].Type != "t\uFFFD" || e[0].IDKeys[0] != "service.name\uFFFD" || e[0].IDKeys[1] != "x\uFFFD" {
		t.Errorf("entity refs %+v", e)
	}
	if km := c.ThreadLocal.AttributeKeyMap; len(km) != 2 || km[1] != "bad\uFFFD" {
		t.Errorf("key map %q", km)
	}
}

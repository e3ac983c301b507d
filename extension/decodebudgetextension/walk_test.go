// SPDX-License-Identifier: Apache-2.0

//go:build linux

package decodebudgetextension

import (
	"bytes"
	"encoding/binary"
	"math"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
)

// TestCountElements: the bomb's samples are counted one each (and the walk
// stops past the maximum), an ordinary message is far under the default,
// and truncated or ill-typed input is refused as malformed.
func TestCountElements(t *testing.T) {
	const bomb = 524_280 // just under 1 MiB
	raw := emptySampleBomb(bomb)
	if len(raw) >= 1<<20 {
		t.Fatalf("the bomb is %d bytes, want under 1 MiB", len(raw))
	}
	n, err := countElements(raw, math.MaxInt)
	if err != nil || n != bomb+3 {
		t.Errorf("bomb: %d elements, %v; want %d", n, err, bomb+3)
	}
	if _, err := countElements(raw, DefaultMaxElements); err != errTooMany {
		t.Errorf("bomb at the default maximum: %v, want errTooMany", err)
	}
	// A field number with high bits set is the field its low 32 bits name
	// to pdata (int32(tag>>3)): counted as that field, not skipped.
	alias := binary.AppendUvarint(nil, (1+1<<32)<<3|2)
	inner := protoField(2, protoField(2, bytes.Repeat([]byte{2<<3 | 2, 0}, bomb)))
	alias = append(binary.AppendUvarint(alias, uint64(len(inner))), inner...)
	if n, err := countElements(alias, math.MaxInt); err != nil || n != bomb+3 {
		t.Errorf("bomb under an aliased field number: %d elements, %v; want %d", n, err, bomb+3)
	}
	// A 64-CPU host's 5 s report (6,400 samples): counted, not refused.
	ord := profilerMessage(t, 64)
	n, err = countElements(ord, DefaultMaxElements)
	if err != nil || n < 6400 {
		t.Errorf("profiler message (%d bytes): %d elements, %v", len(ord), n, err)
	}
	t.Logf("profiler-shaped message of 64 CPUs: %d bytes, %d elements (default maximum %d)", len(ord), n, DefaultMaxElements)

	for name, in := range map[string][]byte{
		"truncated length":  raw[:len(raw)-1],
		"truncated tag":     {0x80},
		"field zero":        {0x02, 0x00},
		"message as varint": {1 << 3, 1},
		"group":             {1<<3 | 3},
		"length past end":   {1<<3 | 2, 5, 0},
		"nested too deep":   nested(maxDepth + 2),
		"sample as fixed64": protoField(1, protoField(2, protoField(2, []byte{2<<3 | 1, 1, 2, 3}))),
	} {
		if _, err := countElements(in, math.MaxInt); err == nil || err == errTooMany {
			t.Errorf("%s: %v, want refused as malformed", name, err)
		}
	}
}

// nested is an attribute value nested depth times (resource attribute ->
// array -> value -> array ...).
func nested(depth int) []byte {
	v := []byte{}
	for range depth {
		v = protoField(5, protoField(1, v)) // AnyValue.array_value.values
	}
	kv := protoField(2, v)
	return protoField(1, protoField(1, protoField(1, kv)))
}

// FuzzCountElements: whatever the input, the walk (from each root) returns
// (never panics),
// counts at most one element per 2 bytes, and never counts past max+1;
// when pdata decodes the input, the walk does not call it malformed
// unless it nests deeper than maxDepth.
func FuzzCountElements(f *testing.F) {
	f.Add(emptySampleBomb(10))
	f.Add(profilerMessage(f, 2))
	f.Add(nested(4))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, root := range []msgKind{kTracesRequest, kLogsRequest} {
			if n, _ := countElementsOf(b, root, 1000); n > len(b)/2+1 || n > 1001 {
				t.Fatalf("%d elements in %d bytes (root %d)", n, len(b), root)
			}
		}
		n, err := countElements(b, 1000)
		if n > len(b)/2+1 || n > 1001 {
			t.Fatalf("%d elements in %d bytes", n, len(b))
		}
		if err == nil || err == errTooMany || err == errTooDeep {
			return
		}
		req := pprofileotlp.NewExportRequest()
		if req.UnmarshalProto(b) == nil {
			t.Logf("pdata decodes what the walk refused (%v): refused, conservatively", err)
		}
	})
}

// TestBudgetInArrivalOrder: a message that needs the whole budget, once
// waiting, is not overtaken by smaller ones that arrive after it.
func TestBudgetInArrivalOrder(t *testing.T) {
	b := newBudget(100)
	b.acquire(60)
	waitingFor := func(n int) {
		for deadline := time.Now().Add(time.Minute); ; {
			b.mu.Lock()
			w := b.waiting
			b.mu.Unlock()
			if w >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d acquires waiting, want %d", w, n)
			}
			runtime.Gosched()
		}
	}
	order := make(chan string, 2)
	go func() { b.acquire(100); order <- "large"; b.release(100) }()
	waitingFor(1)
	go func() { b.acquire(10); order <- "small"; b.release(10) }()
	waitingFor(2) // 40 free: the small one fits, but its turn is after the large one
	b.release(60)
	if first, second := <-order, <-order; first != "large" || second != "small" {
		t.Errorf("served %s then %s, want the large message first", first, second)
	}
}

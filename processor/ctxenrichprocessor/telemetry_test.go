// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ctxenrichprocessor

import (
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/profiletest"
)

// TestProfilesTelemetry: what the join counts in a message reaches the
// processor's metrics under their names and labels (the rules themselves
// are internal/enrich's tests).
func TestProfilesTelemetry(t *testing.T) {
	id, c := testCatalog(t)
	profiletest.AddCheckout(c, 100, profiletest.T0)
	rec := profiletest.Span(100, 101, 0xa, 0x1, profiletest.T0, map[string]string{"http.route": "/pay"})
	profiletest.Observe(t, c, 100, 101, rec, profiletest.T0, profiletest.T0.Add(2*time.Second))
	h := newHarness(t, testConfig(id))

	b := profiletest.NewBuilder()
	p := b.Resource(map[string]any{"process.pid": int64(100)})
	at := profiletest.T0.Add(time.Second)
	b.Sample(p, at, b.Thread(101)...)                          // enriched
	b.Sample(p, at)                                            // no thread.id
	b.Sample(p, at, b.Thread(102)...)                          // unknown thread
	b.Sample(p, at, b.Attr("thread.id", int64(101)), 1<<20)    // invalid attribute index
	b.Resource(map[string]any{"process.pid": int64(999)})      // no such process
	b.Sample(b.Resource(map[string]any{"host.name": "h"}), at) // no PID
	h.run(b.PD)

	for _, c := range []struct {
		name, attr, val string
		want            int64
	}{
		{"otelcol_ctxenrich_samples_enriched", "", "", 1},
		{"otelcol_ctxenrich_samples_unmatched", "reason", "no_thread_id", 1},
		{"otelcol_ctxenrich_samples_unmatched", "reason", "unknown_thread", 1},
		{"otelcol_ctxenrich_samples_unmatched", "reason", "no_process", 1},
		{"otelcol_ctxenrich_samples_invalid", "reason", "attribute_index", 1},
		{"otelcol_ctxenrich_resources_joined", "source", "published", 1},
		{"otelcol_ctxenrich_resources_joined", "signal", "profiles", 1},
		{"otelcol_ctxenrich_resources_unmatched", "reason", "no_process", 1},
		{"otelcol_ctxenrich_resources_unmatched", "reason", "no_pid", 1},
	} {
		if n := h.counter(c.name, c.attr, c.val); n != c.want {
			t.Errorf("%s{%s=%s} = %d, want %d", c.name, c.attr, c.val, n, c.want)
		}
	}
}

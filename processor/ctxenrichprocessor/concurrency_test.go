package ctxenrichprocessor

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/otelctx/otelctx/processor/ctxenrichprocessor/internal/metadata"
)

// TestAmbiguousAndNoTimestamp: a sample whose timestamps fall in two spans
// gets neither; one without a timestamp is left alone.
func TestAmbiguousAndNoTimestamp(t *testing.T) {
	id, c := testCatalog(t)
	addCheckout(c, 100, t0)
	observe(t, c, 100, 101, span(100, 101, 0xa, 0x1, t0, nil), t0)
	observe(t, c, 100, 101, span(100, 101, 0xb, 0x2, t0, nil), t0.Add(time.Second))
	b := newProfBuilder()
	p := b.resource(map[string]any{"process.pid": int64(100)})
	s := b.sample(p, t0.Add(500*time.Millisecond), b.thread(101)...)
	s.TimestampsUnixNano().Append(uint64(t0.Add(1500 * time.Millisecond).UnixNano()))
	same := b.sample(p, t0.Add(100*time.Millisecond), b.thread(101)...)
	same.TimestampsUnixNano().Append(uint64(t0.Add(900 * time.Millisecond).UnixNano()))
	b.sample(p, t0, b.thread(101)...).TimestampsUnixNano().FromRaw(nil)
	h := newHarness(t, testConfig(id))
	out := h.run(b.pd)
	if sampleAt(out, 0, 0).LinkIndex() != 0 || sampleAt(out, 0, 1).LinkIndex() == 0 || sampleAt(out, 0, 2).LinkIndex() != 0 {
		t.Error("wrong samples linked")
	}
	for r, want := range map[string]int64{"ambiguous": 1, "no_timestamp": 1} {
		if n := h.counter("otelcol_ctxenrich_samples_unmatched", "reason", r); n != want {
			t.Errorf("%s: %d", r, n)
		}
	}
}

// TestConcurrentConsumers: messages processed at once (pooled batch
// state) while the receiver keeps writing the catalog; run with -race.
func TestConcurrentConsumers(t *testing.T) {
	id, c := testCatalog(t)
	addCheckout(c, 100, t0)
	sink := new(consumertest.ProfilesSink)
	p, err := NewFactory().CreateProfiles(context.Background(), processortest.NewNopSettings(metadata.Type), testConfig(id), sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	observe(t, c, 100, 101, span(100, 101, 0xa, 0x1, t0, map[string]string{"k": "v"}), t0)
	var wg sync.WaitGroup
	wg.Go(func() { // the receiver: new spans on thread 101
		for i := range 200 {
			c.Observe(100, 101, t0.Add(time.Duration(i+1)*time.Millisecond), span(100, 101, byte(i%250+1), 0x1, t0, map[string]string{"k": "v"}))
		}
	})
	for w := range 4 {
		wg.Go(func() {
			for range 50 {
				b := newProfBuilder()
				prof := b.resource(map[string]any{"process.pid": int64(100)})
				for i := range 20 {
					b.sample(prof, t0.Add(time.Duration(i*10+w)*time.Millisecond), b.thread(101)...)
				}
				orig := pprofile.NewProfiles()
				b.pd.CopyTo(orig)
				if err := p.ConsumeProfiles(context.Background(), b.pd); err != nil {
					t.Error(err)
					return
				}
				for _, err := range validationErrors(orig, b.pd) {
					t.Error(err)
				}
				// Whether a sample finds its record depends on how far the
				// writer got (and the history depth); a link it gets must
				// be one of the writer's spans.
				for _, s := range b.pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().All() {
					if l := b.pd.Dictionary().LinkTable().At(int(s.LinkIndex())); s.LinkIndex() > 0 && l.SpanID()[0] != 1 {
						t.Errorf("foreign link %v", l.SpanID())
					}
				}
			}
		})
	}
	wg.Wait()
}

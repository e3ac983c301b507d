// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ctxenrichprocessor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/featuregate"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/xpdata/pref"
	"go.opentelemetry.io/collector/processor/processorhelper/xprocessorhelper"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/collector/processor/xprocessor"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/testutil/profiletest"
	"github.com/otelctx/otelctx/processor/ctxenrichprocessor/internal/metadata"
)

const (
	benchSamples   = 10000
	benchProcesses = 4
	benchThreads   = 100 // in all, spread over the processes
	benchWindow    = time.Second
	// benchHistory is how far the catalog's histories reach back before the
	// message's first sample, as in a collector that has been running.
	benchHistory = 4 * time.Second
)

// benchInput fills c with the threads' span histories (a new record every
// benchSpanLen, as the eBPF sampler would see them) and returns a message
// shaped like the OTel eBPF profiler's: one ResourceProfiles per process,
// samples in time order across the process's threads, each with thread.id,
// thread.name and cpu.logical_number.
func benchInput(tb testing.TB, c *catalog.Catalog, recAttrs int, unique bool, benchSpanLen time.Duration) pprofile.Profiles {
	rng := rand.New(rand.NewPCG(1, 2))
	perProc := benchThreads / benchProcesses
	for p := range benchProcesses {
		pid := 1000 + p
		profiletest.AddCheckout(c, pid, profiletest.T0.Add(-time.Hour))
		for th := range perProc {
			tid := pid*100 + th
			for at := -benchHistory; at < benchWindow; at += benchSpanLen {
				n := int((at + benchHistory) / benchSpanLen)
				attrs := map[string]string{}
				for k := range recAttrs {
					// 8 values per key (as routes and methods repeat), or
					// one per record (say, a request id).
					v := fmt.Sprintf("value-%d", rng.IntN(8))
					if unique {
						v = fmt.Sprintf("value-%d-%d-%d", tid, n, k)
					}
					attrs[fmt.Sprintf("attr%d", k)] = v
				}
				r := profiletest.Span(pid, tid, byte(th), byte(n), profiletest.T0.Add(at), attrs)
				r.Record.TraceID[15], r.Record.SpanID[7], r.Record.SpanID[6] = byte(p), byte(th), byte(n>>8)
				profiletest.Observe(tb, c, pid, tid, r, profiletest.T0.Add(at), profiletest.T0.Add(at+benchSpanLen-1)) // bracketed: every sample vouched
			}
		}
	}
	b := profiletest.NewBuilder()
	cpus := make([]int32, 8)
	for i := range cpus {
		cpus[i] = b.Attr("cpu.logical_number", int64(i))
	}
	for p := range benchProcesses {
		pid := 1000 + p
		prof := b.Resource(map[string]any{"process.pid": int64(pid), "process.executable.name": "checkout"})
		threads := make([][]int32, perProc)
		for th := range perProc {
			threads[th] = b.Thread(pid*100 + th)
		}
		n := benchSamples / benchProcesses
		for i := range n {
			at := profiletest.T0.Add(time.Duration(i) * benchWindow / time.Duration(n))
			th := rng.IntN(perProc)
			b.Sample(prof, at, append(threads[th][:2:2], cpus[rng.IntN(len(cpus))])...)
		}
	}
	return b.PD
}

// BenchmarkProcessProfiles measures the profiles path on 10,000-sample
// messages from 100 threads of 4 processes against a pass-through
// processor (processorhelper with a function that returns its input) on
// the same messages: samples/s and allocations per sample of the Consume
// call alone (the per-iteration copy of the input is not counted).
//
// The pooled cases run with the collector's pdata.useProtoPooling feature
// gate (--feature-gates=pdata.useProtoPooling) and release each message
// after it was consumed as the collector's pipeline does (refconsumer:
// MarkPipelineOwned, then Unref once the pipeline returns), so that the
// table entries the processor appends come from pdata's pools.
func BenchmarkProcessProfiles(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name     string
		recAttrs int
		spanLen  time.Duration
		pass     func(context.Context, pprofile.Profiles) (pprofile.Profiles, error)
		pooled   bool
		unique   bool // every record's attribute values its own
	}{
		// Spans of 20 ms: about 2 samples per span, so nearly every other
		// sample needs a new link entry (the worst case for allocations:
		// pdata allocates each table entry).
		{"passthrough", 2, 20 * time.Millisecond, passThrough, false, false},
		{"walk", 2, 20 * time.Millisecond, walkSamples, false, false},
		{"enrich/span=20ms/links", 0, 20 * time.Millisecond, nil, false, false},
		{"enrich/span=20ms/links+2attrs", 2, 20 * time.Millisecond, nil, false, false},
		// Spans of 200 ms: about 20 samples per span.
		{"enrich/span=200ms/links", 0, 200 * time.Millisecond, nil, false, false},
		{"enrich/span=200ms/links+2attrs", 2, 200 * time.Millisecond, nil, false, false},
		{"pooled/passthrough", 2, 20 * time.Millisecond, passThrough, true, false},
		{"pooled/walk", 2, 20 * time.Millisecond, walkSamples, true, false},
		{"pooled/enrich/span=20ms/links", 0, 20 * time.Millisecond, nil, true, false},
		// One attribute: the sample's index slice (capacity 4 for the
		// profiler's 3 indices, as pdata decodes them) takes it in place.
		{"pooled/enrich/span=20ms/links+1attr", 1, 20 * time.Millisecond, nil, true, false},
		{"pooled/enrich/span=20ms/links+2attrs", 2, 20 * time.Millisecond, nil, true, false},
		// Values unique to each record: no attribute set is shared.
		{"pooled/enrich/span=20ms/links+2uniqueattrs", 2, 20 * time.Millisecond, nil, true, true},
		{"pooled/enrich/span=200ms/links", 0, 200 * time.Millisecond, nil, true, false},
		{"pooled/enrich/span=200ms/links+2attrs", 2, 200 * time.Millisecond, nil, true, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.pooled {
				setPooling(b, true)
				defer setPooling(b, false)
			}
			id, c := testCatalog(b)
			in := benchInput(b, c, bc.recAttrs, bc.unique, bc.spanLen)
			set := processortest.NewNopSettings(metadata.Type)
			var p xprocessor.Profiles
			var err error
			if bc.pass != nil {
				p, err = xprocessorhelper.NewProfiles(ctx, set, testConfig(id), consumertest.NewNop(), bc.pass)
			} else {
				p, err = NewFactory().CreateProfiles(ctx, set, testConfig(id), consumertest.NewNop())
			}
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Start(ctx, testHost); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = p.Shutdown(ctx) }()
			if bc.pass == nil { // the setup must produce a batch that is almost all matched
				pd := pprofile.NewProfiles()
				in.CopyTo(pd)
				if err := p.ConsumeProfiles(ctx, pd); err != nil {
					b.Fatal(err)
				}
				linked := 0
				for _, rp := range pd.ResourceProfiles().All() {
					for _, s := range rp.ScopeProfiles().At(0).Profiles().At(0).Samples().All() {
						if s.LinkIndex() > 0 {
							linked++
						}
					}
				}
				if linked < benchSamples*9/10 {
					b.Fatalf("only %d of %d samples linked", linked, benchSamples)
				}
			}
			var mallocs uint64
			var m0, m1 runtime.MemStats
			// The consuming thread's CPU time is what a shared machine's
			// load disturbs least (cpuTime, hostile_bench_test.go).
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var cpu time.Duration
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				pd := pprofile.NewProfiles()
				in.CopyTo(pd)
				owned := bc.pooled && pref.MarkPipelineOwnedProfiles(pd)
				runtime.ReadMemStats(&m0)
				b.StartTimer()
				c0 := profiletest.CPUTime(b)
				if err := p.ConsumeProfiles(ctx, pd); err != nil {
					b.Fatal(err)
				}
				cpu += profiletest.CPUTime(b) - c0
				b.StopTimer()
				runtime.ReadMemStats(&m1)
				mallocs += m1.Mallocs - m0.Mallocs
				if owned {
					pref.UnrefProfiles(pd) // back to pdata's pools
				}
				b.StartTimer()
			}
			n := float64(b.N) * benchSamples
			b.ReportMetric(n/b.Elapsed().Seconds(), "samples/s")
			b.ReportMetric(float64(mallocs)/n, "allocs/sample")
			b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/sample")
		})
	}
}

// passThrough is the baseline processor: it returns its input.
func passThrough(_ context.Context, pd pprofile.Profiles) (pprofile.Profiles, error) { return pd, nil }

// walkSink keeps walkSamples' result alive.
var walkSink int64

// walkSamples is the second baseline: a processor that visits every sample
// and reads what any per-sample join must (its attribute indices and first
// timestamp), and changes nothing.
func walkSamples(_ context.Context, pd pprofile.Profiles) (pprofile.Profiles, error) {
	var sum int64
	for _, rp := range pd.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, p := range sp.Profiles().All() {
				for _, s := range p.Samples().All() {
					for _, a := range s.AttributeIndices().All() {
						sum += int64(a)
					}
					if ts := s.TimestampsUnixNano(); ts.Len() > 0 {
						sum += int64(ts.At(0))
					}
				}
			}
		}
	}
	walkSink = sum
	return pd, nil
}

// setPooling turns the pdata.useProtoPooling feature gate on or off.
func setPooling(tb testing.TB, on bool) {
	if err := featuregate.GlobalRegistry().Set("pdata.useProtoPooling", on); err != nil {
		tb.Fatal(err)
	}
}

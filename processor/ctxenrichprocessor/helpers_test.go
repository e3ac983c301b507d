// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ctxenrichprocessor

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/pprofiletest"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
	"github.com/otelctx/otelctx/internal/watcher"
	"github.com/otelctx/otelctx/processor/ctxenrichprocessor/internal/metadata"
)

var update = flag.Bool("update", false, "rewrite the expected golden files from the processor's output")

// t0 is the tests' reference time (processes are created at or after it).
var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

var idSeq atomic.Int64

// testHost is the host the tests start processors on: its extensions are
// the watchers testCatalog made, each under its own ID.
var testHost = watchertest.NewHost()

// testCatalog is the empty catalog of a watcher (never started: the tests
// fill the catalog) that testHost has as a fresh processctx extension.
func testCatalog(t testing.TB) (component.ID, *catalog.Catalog) {
	t.Helper()
	id := component.MustNewIDWithName("processctx", fmt.Sprintf("test%d", idSeq.Add(1)))
	w, err := watcher.New(watcher.Settings{}, *watcher.NewDefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	testHost.Add(id, w)
	return id, w.Catalog()
}

// addProcess puts a publishing process in the catalog.
func addProcess(c *catalog.Catalog, pid int, created time.Time, exe string, attrs ...processctx.Attribute) *publisher.Process {
	p := &publisher.Process{
		ID:             publisher.ProcessID{PID: pid, StartTicks: uint64(created.Sub(t0) / (10 * time.Millisecond))},
		CreationTime:   created,
		ExecutablePath: "/usr/bin/" + exe,
		ExecutableName: exe,
	}
	p.Context.Resource.Attributes = attrs
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
	return p
}

func strAttr(k, v string) processctx.Attribute {
	return processctx.Attribute{Key: k, Value: processctx.Value{Kind: processctx.KindStr, Str: v}}
}

// span builds a thread record with trace id {tr...} and span id {sp...}.
func span(pid, tid int, tr, sp byte, seen time.Time, attrs map[string]string) *catalog.ThreadRecord {
	r := &catalog.ThreadRecord{PID: pid, TID: tid, SeenAt: seen, Attributes: attrs}
	r.Record.TraceID = threadctx.TraceID{tr, tr, tr, tr}
	r.Record.SpanID = threadctx.SpanID{sp, sp}
	return r
}

// observe records rec on its thread at each of the times.
func observe(t testing.TB, c *catalog.Catalog, pid, tid int, rec *catalog.ThreadRecord, at ...time.Time) {
	t.Helper()
	p, ok := c.Process(pid)
	if !ok {
		t.Fatalf("process %d not in the catalog", pid)
	}
	for _, a := range at {
		if !c.ObserveFor(p.ID, tid, a, rec, false) {
			t.Fatalf("observation of %d/%d at %v dropped", pid, tid, a)
		}
	}
}

// observeExact records rec on its thread at each of the times, as taken at
// a profiler's sample moments.
func observeExact(t testing.TB, c *catalog.Catalog, pid, tid int, rec *catalog.ThreadRecord, at ...time.Time) {
	t.Helper()
	p, ok := c.Process(pid)
	if !ok {
		t.Fatalf("no process %d", pid)
	}
	for _, a := range at {
		if !c.ObserveFor(p.ID, tid, a, rec, true) {
			t.Fatalf("observation of %d/%d at %v dropped", pid, tid, a)
		}
	}
}

// profBuilder writes profiles the way the OTel eBPF profiler does: one
// dictionary for the message, index 0 of every table the empty element.
type profBuilder struct {
	pd   pprofile.Profiles
	dict pprofile.ProfilesDictionary
}

func newProfBuilder() *profBuilder {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	d.StringTable().Append("")
	d.AttributeTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	b := &profBuilder{pd: pd, dict: d}
	// A stack, so that samples point at something real.
	fn := d.FunctionTable().AppendEmpty()
	fn.SetNameStrindex(b.str("main.work"))
	loc := d.LocationTable().AppendEmpty()
	loc.Lines().AppendEmpty().SetFunctionIndex(1)
	d.StackTable().AppendEmpty().LocationIndices().Append(1)
	return b
}

func (b *profBuilder) str(s string) int32 {
	i, err := pprofile.SetString(b.dict.StringTable(), s)
	if err != nil {
		panic(err)
	}
	return i
}

func (b *profBuilder) attr(k string, v any) int32 {
	kv := pprofile.NewKeyValueAndUnit()
	kv.SetKeyStrindex(b.str(k))
	if err := kv.Value().FromRaw(v); err != nil {
		panic(err)
	}
	i, err := pprofile.SetAttribute(b.dict.AttributeTable(), kv)
	if err != nil {
		panic(err)
	}
	return i
}

func (b *profBuilder) link(tr, sp byte) int32 {
	l := pprofile.NewLink()
	l.SetTraceID(pcommon.TraceID{tr, tr, tr, tr})
	l.SetSpanID(pcommon.SpanID{sp, sp})
	i, err := pprofile.SetLink(b.dict.LinkTable(), l)
	if err != nil {
		panic(err)
	}
	return i
}

// resource starts a ResourceProfiles with one scope and one CPU profile.
func (b *profBuilder) resource(attrs map[string]any) pprofile.Profile {
	rp := b.pd.ResourceProfiles().AppendEmpty()
	if err := rp.Resource().Attributes().FromRaw(attrs); err != nil {
		panic(err)
	}
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName("go.opentelemetry.io/ebpf-profiler")
	p := sp.Profiles().AppendEmpty()
	p.SetTime(pcommon.NewTimestampFromTime(t0))
	p.SetDurationNano(uint64(time.Minute))
	p.SampleType().SetTypeStrindex(b.str("samples"))
	p.SampleType().SetUnitStrindex(b.str("count"))
	return p
}

// sample adds a sample of the stack at time at with the attributes.
func (b *profBuilder) sample(p pprofile.Profile, at time.Time, attrs ...int32) pprofile.Sample {
	s := p.Samples().AppendEmpty()
	s.SetStackIndex(1)
	s.Values().Append(1)
	s.TimestampsUnixNano().Append(uint64(at.UnixNano()))
	s.AttributeIndices().Append(attrs...)
	return s
}

// thread adds the attributes the profiler puts on a sample of thread tid.
func (b *profBuilder) thread(tid int) []int32 {
	return []int32{b.attr("thread.id", int64(tid)), b.attr("thread.name", fmt.Sprintf("worker-%d", tid))}
}

// harness is a ctxenrich profiles processor over a test catalog, with its
// metrics readable.
type harness struct {
	t       testing.TB
	proc    interface{ Shutdown(context.Context) error }
	sink    *consumertest.ProfilesSink
	reader  *sdkmetric.ManualReader
	consume func(pprofile.Profiles) error
}

func newHarness(t testing.TB, cfg *Config) *harness {
	t.Helper()
	h := &harness{t: t, sink: new(consumertest.ProfilesSink), reader: sdkmetric.NewManualReader()}
	set := processortest.NewNopSettings(metadata.Type)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	set.MeterProvider = mp
	p, err := NewFactory().CreateProfiles(context.Background(), set, cfg, h.sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), testHost); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	h.proc = p
	h.consume = func(pd pprofile.Profiles) error { return p.ConsumeProfiles(context.Background(), pd) }
	return h
}

func testConfig(id component.ID) *Config {
	cfg := createDefaultConfig().(*Config)
	cfg.Extension = id
	return cfg
}

// run processes in (a copy is kept to validate the output against) and
// returns the output.
func (h *harness) run(in pprofile.Profiles) pprofile.Profiles {
	h.t.Helper()
	orig := pprofile.NewProfiles()
	in.CopyTo(orig)
	h.sink.Reset()
	if err := h.consume(in); err != nil {
		h.t.Fatal(err)
	}
	all := h.sink.AllProfiles()
	if len(all) != 1 {
		h.t.Fatalf("%d messages out", len(all))
	}
	validate(h.t, orig, all[0])
	return all[0]
}

// counter returns the sum of a counter's points whose attribute attr (if
// not empty) has value val.
func (h *harness) counter(name, attr, val string) int64 {
	h.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		h.t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if attr == "" {
					n += dp.Value
				} else if v, ok := dp.Attributes.Value(attribute.Key(attr)); ok && v.AsString() == val {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// checkGolden compares out with testdata/<name>.yaml (rewritten with -update).
func checkGolden(t *testing.T, name string, out pprofile.Profiles) {
	t.Helper()
	path := filepath.Join("testdata", name+".yaml")
	if *update {
		// Marshaling turns the strings of the message it is given into
		// string table references: write a copy.
		cp := pprofile.NewProfiles()
		out.CopyTo(cp)
		if err := golden.WriteProfilesToFile(path, cp); err != nil {
			t.Fatal(err)
		}
	}
	want, err := golden.ReadProfiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprofiletest.CompareProfiles(want, out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func pprofiletestCompare(want, got pprofile.Profiles) error {
	return pprofiletest.CompareProfiles(want, got)
}

func pcommonTime(t time.Time) pcommon.Timestamp { return pcommon.NewTimestampFromTime(t) }

func countSamples(rp pprofile.ResourceProfiles) int {
	n := 0
	for _, sp := range rp.ScopeProfiles().All() {
		for _, p := range sp.Profiles().All() {
			n += p.Samples().Len()
		}
	}
	return n
}

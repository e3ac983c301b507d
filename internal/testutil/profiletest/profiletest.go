// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package profiletest builds what the join's tests and benchmarks feed it:
// processes and thread histories in a catalog, and profiles shaped like
// the OTel eBPF profiler's (one dictionary per message, index 0 of every
// table the empty element).
package profiletest

import (
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/format/threadctx"
	"github.com/otelctx/otelctx/internal/publisher"
)

// T0 is the tests' reference time (processes are created at or after it).
var T0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// AddProcess puts a publishing process in the catalog.
func AddProcess(c *catalog.Catalog, pid int, created time.Time, exe string, attrs ...processctx.Attribute) *publisher.Process {
	p := &publisher.Process{
		ID:             publisher.ProcessID{PID: pid, StartTicks: uint64(created.Sub(T0) / (10 * time.Millisecond))},
		CreationTime:   created,
		ExecutablePath: "/usr/bin/" + exe,
		ExecutableName: exe,
	}
	p.Context.Resource.Attributes = attrs
	c.Apply([]publisher.Event{{Kind: publisher.Found, Process: p}})
	return p
}

// AddCheckout puts a process publishing the resource attributes of a
// typical SDK in the catalog.
func AddCheckout(c *catalog.Catalog, pid int, created time.Time) *publisher.Process {
	return AddProcess(c, pid, created, "checkout",
		StrAttr("service.name", "checkout"),
		StrAttr("service.version", "1.4.2"),
		StrAttr("service.instance.id", "inst-checkout"),
		StrAttr("deployment.environment.name", "prod"),
		StrAttr("telemetry.sdk.language", "go"),
		StrAttr("host.name", "sdk-host"),
		StrAttr("team", "payments"))
}

// StrAttr is a published string attribute.
func StrAttr(k, v string) processctx.Attribute {
	return processctx.Attribute{Key: k, Value: processctx.Value{Kind: processctx.KindStr, Str: v}}
}

// Span builds a thread record with trace id {tr...} and span id {sp...}.
func Span(pid, tid int, tr, sp byte, seen time.Time, attrs map[string]string) *catalog.ThreadRecord {
	r := &catalog.ThreadRecord{PID: pid, TID: tid, SeenAt: seen, Attributes: attrs}
	r.Record.TraceID = threadctx.TraceID{tr, tr, tr, tr}
	r.Record.SpanID = threadctx.SpanID{sp, sp}
	return r
}

// Observe records rec on its thread at each of the times.
func Observe(t testing.TB, c *catalog.Catalog, pid, tid int, rec *catalog.ThreadRecord, at ...time.Time) {
	t.Helper()
	observe(t, c, pid, tid, rec, false, at)
}

// ObserveExact records rec on its thread at each of the times, as taken at
// a profiler's sample moments.
func ObserveExact(t testing.TB, c *catalog.Catalog, pid, tid int, rec *catalog.ThreadRecord, at ...time.Time) {
	t.Helper()
	observe(t, c, pid, tid, rec, true, at)
}

func observe(t testing.TB, c *catalog.Catalog, pid, tid int, rec *catalog.ThreadRecord, exact bool, at []time.Time) {
	t.Helper()
	p, ok := c.Process(pid)
	if !ok {
		t.Fatalf("process %d not in the catalog", pid)
	}
	for _, a := range at {
		if !c.ObserveFor(p.ID, tid, a, rec, exact) {
			t.Fatalf("observation of %d/%d at %v dropped", pid, tid, a)
		}
	}
}

// Builder writes profiles the way the OTel eBPF profiler does: one
// dictionary for the message, index 0 of every table the empty element.
type Builder struct {
	PD   pprofile.Profiles
	Dict pprofile.ProfilesDictionary
}

// NewBuilder starts a message whose dictionary has one stack (one
// location, one function), so that samples point at something real.
func NewBuilder() *Builder {
	pd := pprofile.NewProfiles()
	d := pd.Dictionary()
	d.StringTable().Append("")
	d.AttributeTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	b := &Builder{PD: pd, Dict: d}
	fn := d.FunctionTable().AppendEmpty()
	fn.SetNameStrindex(b.Str("main.work"))
	loc := d.LocationTable().AppendEmpty()
	loc.Lines().AppendEmpty().SetFunctionIndex(1)
	d.StackTable().AppendEmpty().LocationIndices().Append(1)
	return b
}

// Str returns the string table index of s, adding it if needed.
func (b *Builder) Str(s string) int32 {
	i, err := pprofile.SetString(b.Dict.StringTable(), s)
	if err != nil {
		panic(err)
	}
	return i
}

// Attr returns the attribute table index of k=v, adding it if needed.
func (b *Builder) Attr(k string, v any) int32 {
	kv := pprofile.NewKeyValueAndUnit()
	kv.SetKeyStrindex(b.Str(k))
	if err := kv.Value().FromRaw(v); err != nil {
		panic(err)
	}
	i, err := pprofile.SetAttribute(b.Dict.AttributeTable(), kv)
	if err != nil {
		panic(err)
	}
	return i
}

// Link returns the link table index of trace {tr...}, span {sp...}.
func (b *Builder) Link(tr, sp byte) int32 {
	l := pprofile.NewLink()
	l.SetTraceID(pcommon.TraceID{tr, tr, tr, tr})
	l.SetSpanID(pcommon.SpanID{sp, sp})
	i, err := pprofile.SetLink(b.Dict.LinkTable(), l)
	if err != nil {
		panic(err)
	}
	return i
}

// Resource starts a ResourceProfiles with one scope and one CPU profile.
func (b *Builder) Resource(attrs map[string]any) pprofile.Profile {
	rp := b.PD.ResourceProfiles().AppendEmpty()
	if err := rp.Resource().Attributes().FromRaw(attrs); err != nil {
		panic(err)
	}
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName("go.opentelemetry.io/ebpf-profiler")
	p := sp.Profiles().AppendEmpty()
	p.SetTime(pcommon.NewTimestampFromTime(T0))
	p.SetDurationNano(uint64(time.Minute))
	p.SampleType().SetTypeStrindex(b.Str("samples"))
	p.SampleType().SetUnitStrindex(b.Str("count"))
	return p
}

// Sample adds a sample of the stack at time at with the attributes.
func (b *Builder) Sample(p pprofile.Profile, at time.Time, attrs ...int32) pprofile.Sample {
	s := p.Samples().AppendEmpty()
	s.SetStackIndex(1)
	s.Values().Append(1)
	s.TimestampsUnixNano().Append(uint64(at.UnixNano()))
	s.AttributeIndices().Append(attrs...)
	return s
}

// Thread returns the attributes the profiler puts on a sample of thread tid.
func (b *Builder) Thread(tid int) []int32 {
	return []int32{b.Attr("thread.id", int64(tid)), b.Attr("thread.name", fmt.Sprintf("worker-%d", tid))}
}

// CPUTime is the calling thread's CPU time so far: what a shared
// machine's load disturbs least in a benchmark.
func CPUTime(tb testing.TB) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

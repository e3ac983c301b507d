// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxextension

import (
	"context"
	"encoding/hex"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/otelctx/otelctx/extension/processctxextension/internal/metadata"
	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
	"github.com/otelctx/otelctx/processor/ctxenrichprocessor"
)

// TestDDRecordsEnrichProfiles: a DD_OTEL_CTX record read by this extension
// (no process_ctx receiver anywhere) links a profile sample of its thread
// to its span through an unchanged ctx_enrich processor, which does not
// know the source.
func TestDDRecordsEnrichProfiles(t *testing.T) {
	testenv.RequireRoot(t)
	w := ddwriter.Start(t, ddwriter.Glibc, ddwriter.Options{Threads: 1})
	w.Set(0, 0x0af7651916cd43dd, 0x8448eb211c80319c, 0xb7ad6b7169203331)
	tid := w.Threads[0].TID

	cfg := watchertest.FastConfig(w.PID)
	cfg.ThreadSampler = ThreadSamplerPtrace
	cfg.ThreadContext.Interval = 100 * time.Millisecond
	cfg.DDOtelCtx.Processes = DDProcessesAll
	id := component.NewIDWithName(metadata.Type, "ddenrich")
	ext := startExtension(t, id, cfg)
	cat := ext.(*processctxExtension).Watcher().Catalog()
	eventually(t, "the DD record in the catalog", func() bool { _, _, ok := cat.Thread(w.PID, tid); return ok })
	// A sample taken between two observations of the record.
	var o catalog.Observation
	eventually(t, "a second observation", func() bool {
		var ok bool
		o, ok = cat.ObservationAt(w.PID, tid, time.Now())
		return ok && o.Record != nil && o.Last.After(o.First)
	})
	at := o.First.Add(o.Last.Sub(o.First) / 2)

	pd := pprofile.NewProfiles()
	dict := pd.Dictionary()
	dict.StringTable().Append("", "thread.id")
	dict.AttributeTable().AppendEmpty()
	dict.LinkTable().AppendEmpty()
	dict.StackTable().AppendEmpty()
	a := dict.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(1)
	a.Value().SetInt(int64(tid))
	rp := pd.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutInt("process.pid", int64(w.PID))
	prof := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	s := prof.Samples().AppendEmpty()
	s.AttributeIndices().Append(1)
	s.TimestampsUnixNano().Append(uint64(at.UnixNano()))

	f := ctxenrichprocessor.NewFactory()
	pcfg := f.CreateDefaultConfig().(*ctxenrichprocessor.Config)
	pcfg.Extension = id
	sink := new(consumertest.ProfilesSink)
	proc, err := f.CreateProfiles(context.Background(), processortest.NewNopSettings(f.Type()), pcfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	host := watchertest.NewHost().AddComponent(id, ext)
	if err := proc.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = proc.Shutdown(context.Background()) }()
	if err := proc.ConsumeProfiles(context.Background(), pd); err != nil {
		t.Fatal(err)
	}
	out := sink.AllProfiles()[0]
	got := out.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0)
	li := got.LinkIndex()
	if li <= 0 || int(li) >= out.Dictionary().LinkTable().Len() {
		t.Fatalf("sample not linked (link index %d)", li)
	}
	l := out.Dictionary().LinkTable().At(int(li))
	traceID, spanID := l.TraceID(), l.SpanID()
	if hex.EncodeToString(traceID[:]) != "0af7651916cd43dd8448eb211c80319c" || hex.EncodeToString(spanID[:]) != "b7ad6b7169203331" {
		t.Fatalf("link %x %x", traceID, spanID)
	}
}

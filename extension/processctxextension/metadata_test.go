package processctxextension

import (
	"context"
	"os"
	"reflect"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"

	"github.com/otelctx/otelctx/extension/processctxextension/internal/metadata"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestMetadataMatchesTelemetry: every instrument the extension registers
// (at creation, and at Start for each thread_sampler: off, ptrace, ebpf)
// is in metadata.yaml with the same description, unit and kind, and every
// metric metadata.yaml lists is registered. The attribute enums are
// checked against the code's values in internal/watcher.
func TestMetadataMatchesTelemetry(t *testing.T) {
	testenv.RequireRoot(t) // Start's scanner and samplers
	md := telemetrytest.ReadMetadata(t, "metadata.yaml")
	rec := &telemetrytest.Recorder{}
	for _, sampler := range []string{ThreadSamplerOff, ThreadSamplerPtrace, ThreadSamplerEBPF} {
		set := extensiontest.NewNopSettings(metadata.Type)
		set.TelemetrySettings.MeterProvider = rec
		cfg := fastConfig(os.Getpid())
		cfg.ThreadSampler = sampler
		ext, err := NewFactory().Create(context.Background(), set, cfg)
		if err != nil {
			t.Fatal(err)
		}
		// The eBPF sampler's instruments are created before it loads: a
		// kernel refusing it still registers them (Start then fails).
		if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Logf("thread_sampler %s: Start: %v", sampler, err)
		}
		if err := ext.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	got := rec.Instruments()
	telemetrytest.CheckInstruments(t, md, metadata.ScopeName, got)
	// Two code paths register the same metric: one description between them.
	for _, in := range got {
		for _, other := range got {
			if in.Name == other.Name && !reflect.DeepEqual(in, other) {
				t.Errorf("%s registered twice, differently: %+v and %+v", in.Name, in, other)
			}
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxextension

import (
	"context"
	"os"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"

	"github.com/otelctx/otelctx/extension/processctxextension/internal/metadata"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/watchertest"
)

// TestMetadataMatchesTelemetry: every instrument the extension registers
// (at creation, and at Start for each thread_sampler: off, ptrace, ebpf)
// is in metadata.yaml with the same description, unit and kind, and is
// registered once; every metric metadata.yaml lists is registered. The
// attribute enums are checked against the code's values in
// internal/watcher.
func TestMetadataMatchesTelemetry(t *testing.T) {
	testenv.RequireRoot(t) // Start's scanner and samplers
	md := telemetrytest.ReadMetadata(t, "metadata.yaml")
	for _, sampler := range []string{ThreadSamplerOff, ThreadSamplerPtrace, ThreadSamplerEBPF} {
		rec := &telemetrytest.Recorder{}
		set := extensiontest.NewNopSettings(metadata.Type)
		set.TelemetrySettings.MeterProvider = rec
		cfg := watchertest.FastConfig(os.Getpid())
		cfg.ThreadSampler = sampler
		ext, err := NewFactory().Create(context.Background(), set, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
			t.Logf("thread_sampler %s: Start: %v", sampler, err)
		}
		if err := ext.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		telemetrytest.CheckInstruments(t, md, metadata.ScopeName, rec.Instruments())
		telemetrytest.CheckRegisteredOnce(t, metadata.ScopeName, rec.Instruments())
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package decodebudgetextension

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.opentelemetry.io/collector/extension/extensiontest"

	"github.com/otelctx/otelctx/extension/decodebudgetextension/internal/metadata"
	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
)

func TestDefaultConfig(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	if err := componenttest.CheckConfigStruct(cfg); err != nil {
		t.Fatal(err)
	}
	if err := confmap.Validate(cfg); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
}

// TestLoadConfig: the keys load, and non-positive bounds are refused.
func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	load := func(id string) *Config {
		sub, err := cm.Sub(id)
		if err != nil {
			t.Fatal(err)
		}
		cfg := createDefaultConfig().(*Config)
		if err := sub.Unmarshal(cfg); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if got := *load("decode_budget"); got != (Config{DefaultMaxDecodingBytes, DefaultMaxElements}) {
		t.Errorf("defaults: %+v", got)
	}
	if got := *load("decode_budget/custom"); got != (Config{4 << 20, 50000}) {
		t.Errorf("custom: %+v", got)
	}
	err = load("decode_budget/invalid").Validate()
	if err == nil || !strings.Contains(err.Error(), "max_decoding_bytes") || !strings.Contains(err.Error(), "max_elements") {
		t.Errorf("invalid: %v", err)
	}
}

// TestLifecycle: created, started and shut down (goleak: TestMain) with
// the type and stability of metadata.yaml.
func TestLifecycle(t *testing.T) {
	f := NewFactory()
	if f.Type() != metadata.Type || f.Stability() != metadata.ExtensionStability {
		t.Fatal("factory type or stability differ from metadata")
	}
	ctx := context.Background()
	ext, err := f.Create(ctx, extensiontest.NewNopSettings(metadata.Type), f.CreateDefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	if err := ext.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMetadataMatchesTelemetry: every instrument is in metadata.yaml with
// the same description, unit and kind, once, and the reasons are the
// enum's.
func TestMetadataMatchesTelemetry(t *testing.T) {
	md := telemetrytest.ReadMetadata(t, "metadata.yaml")
	rec := &telemetrytest.Recorder{}
	set := extensiontest.NewNopSettings(metadata.Type)
	set.TelemetrySettings.MeterProvider = rec
	f := NewFactory()
	ext, err := f.Create(context.Background(), set, f.CreateDefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	telemetrytest.CheckInstruments(t, md, metadata.ScopeName, rec.Instruments())
	telemetrytest.CheckRegisteredOnce(t, metadata.ScopeName, rec.Instruments())
	telemetrytest.CheckEnum(t, md, "otelcol_decode_budget_refused", "refusal_reason", "reason", []string{reasonElements, reasonMalformed})
}

var _ component.Config = (*Config)(nil)

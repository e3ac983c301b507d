// SPDX-License-Identifier: Apache-2.0

package processctxreceiver

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

func loadConfig(t *testing.T, name string) (*Config, error) {
	t.Helper()
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := createDefaultConfig().(*Config)
	sub, err := cm.Sub(component.NewIDWithName(metadata.Type, name).String())
	if err != nil {
		t.Fatal(err)
	}
	return cfg, sub.Unmarshal(cfg)
}

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want *Config
	}{
		{"", &Config{Extension: component.MustNewID("process_ctx"), EntityInterval: 5 * time.Minute, EventFormat: EventFormatLegacy}},
		{"custom", &Config{Extension: component.MustNewIDWithName("process_ctx", "host"), EntityInterval: time.Minute,
			EventFormat: EventFormatSpec, K8sNodeName: "node-7", EnvironmentEntities: true}},
	} {
		cfg, err := loadConfig(t, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if err := confmap.Validate(cfg); err != nil {
			t.Fatalf("%q: %v", tc.name, err)
		}
		if !reflect.DeepEqual(cfg, tc.want) {
			t.Errorf("%q: got\n%+v\nwant\n%+v", tc.name, cfg, tc.want)
		}
	}
}

// A setting that moved to the extension is refused with where it goes.
func TestMovedKeys(t *testing.T) {
	t.Parallel()
	_, err := loadConfig(t, "moved")
	for _, want := range []string{
		"collection_interval, thread_sampler moved from the process_ctx receiver to the process_ctx extension in otelctx 0.2.0: " +
			"write them, unchanged, under extensions: process_ctx:, list process_ctx in service.extensions",
		"ctx_enrich processor's receiver: processctx becomes extension: process_ctx",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
	if moved, _, _ := strings.Cut(fmt.Sprint(err), " moved from"); strings.Contains(moved, "entity_interval") {
		t.Errorf("entity_interval is the receiver's, yet refused: %v", err)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(t, "invalid")
	if err != nil {
		t.Fatal(err)
	}
	err = confmap.Validate(cfg)
	for _, want := range []string{
		`extension must name a process_ctx extension (process_ctx or process_ctx/<name>), got "otlp"`,
		"entity_interval must be positive, got 0s",
		`event_format must be "legacy" or "spec", got "otel"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}

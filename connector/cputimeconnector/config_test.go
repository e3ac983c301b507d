// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
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

// TestLoadConfig compares whole structs loaded from testdata/config.yaml.
func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   component.ID
		want *Config
	}{
		{component.MustNewID("cpu_time"), createDefaultConfig().(*Config)},
		{component.MustNewIDWithName("cpu_time", "custom"), &Config{
			Dimensions:                  []Dimension{{Name: "http.route"}, {Name: "http.request.method"}},
			ResourceAttributes:          []string{"service.name", "k8s.pod.name"},
			AggregationTemporality:      Delta,
			AggregationCardinalityLimit: 100,
			MetricsFlushInterval:        30 * time.Second,
			Exemplars:                   Exemplars{},
			SpanRecords:                 SpanRecords{FlushInterval: 5 * time.Second, MaxPerInterval: 50},
		}},
	} {
		t.Run(tc.id.String(), func(t *testing.T) {
			sub, err := cm.Sub(tc.id.String())
			if err != nil {
				t.Fatal(err)
			}
			cfg := createDefaultConfig().(*Config)
			if err := sub.Unmarshal(cfg); err != nil {
				t.Fatal(err)
			}
			if err := confmap.Validate(cfg); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg, tc.want) {
				t.Errorf("loaded\n%+v\nwant\n%+v", cfg, tc.want)
			}
		})
	}
}

// TestValidate: each bound is refused with a message naming the key.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"too many dimensions", func(c *Config) {
			c.Dimensions = nil
			for i := range MaxDimensions + 1 {
				c.Dimensions = append(c.Dimensions, Dimension{Name: string(rune('a' + i))})
			}
		}, "dimensions: 9, at most 8"},
		{"empty dimension", func(c *Config) { c.Dimensions = []Dimension{{}} }, "a dimension without a name"},
		{"duplicate dimension", func(c *Config) { c.Dimensions = []Dimension{{Name: "a"}, {Name: "a"}} }, `"a" twice`},
		{"overflow dimension", func(c *Config) { c.Dimensions = []Dimension{{Name: overflowKey}} }, "overflow point's"},
		{"empty resource attribute", func(c *Config) { c.ResourceAttributes = []string{""} }, "resource_attributes: an empty key"},
		{"temporality", func(c *Config) { c.AggregationTemporality = "delta" }, "aggregation_temporality"},
		{"no limit", func(c *Config) { c.AggregationCardinalityLimit = 0 }, "aggregation_cardinality_limit: 0"},
		{"flush", func(c *Config) { c.MetricsFlushInterval = time.Millisecond }, "metrics_flush_interval"},
		{"expiration", func(c *Config) { c.MetricsExpiration = -time.Second }, "metrics_expiration"},
		{"exemplars", func(c *Config) { c.Exemplars.MaxPerDataPoint = 0 }, "exemplars.max_per_data_point"},
		{"records flush", func(c *Config) { c.SpanRecords.FlushInterval = 0 }, "span_records.flush_interval"},
		{"records", func(c *Config) { c.SpanRecords.MaxPerInterval = 0 }, "span_records.max_per_interval"},
		{"top", func(c *Config) { c.SpanRecords.TopFunctions = 21 }, "span_records.top_functions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := createDefaultConfig().(*Config)
			tc.edit(cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}

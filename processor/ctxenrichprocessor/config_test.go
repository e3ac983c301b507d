package ctxenrichprocessor

import (
	"path/filepath"
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
	if cfg.Receiver.String() != "processctx" || cfg.MaxRecordAge != DefaultMaxRecordAge || cfg.OverrideLinks {
		t.Errorf("defaults: %+v", cfg)
	}
}

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := cm.Sub(component.MustNewIDWithName("ctxenrich", "custom").String())
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
	if cfg.Receiver != component.MustNewIDWithName("processctx", "host") || cfg.MaxRecordAge != 2*time.Second ||
		!cfg.OverrideLinks || cfg.ResourceMerge.OtherKeys != OtherKeysIgnore ||
		len(cfg.ResourceMerge.PublishedWins) != 2 || cfg.ResourceMerge.PublishedWins[1] != "host.name" {
		t.Errorf("loaded %+v", cfg)
	}
}

func TestConfigValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		mut  func(*Config)
		want string
	}{
		"no receiver":    {func(c *Config) { c.Receiver = component.ID{} }, "receiver must name the processctx receiver"},
		"wrong receiver": {func(c *Config) { c.Receiver = component.MustNewID("otlp") }, `got "otlp"`},
		"age":            {func(c *Config) { c.MaxRecordAge = 0 }, "max_record_age must be positive"},
		"empty key":      {func(c *Config) { c.ResourceMerge.PublishedWins = []string{""} }, "published_wins[0]"},
		"other_keys":     {func(c *Config) { c.ResourceMerge.OtherKeys = "upsert" }, `other_keys must be "insert" or "ignore", got "upsert"`},
	} {
		cfg := createDefaultConfig().(*Config)
		tc.mut(cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

func TestPublishedWins(t *testing.T) {
	m := ResourceMergeConfig{PublishedWins: []string{"service.", "host.name"}}
	for key, want := range map[string]bool{
		"service.name": true, "service": false, "servicex.name": false,
		"host.name": true, "host.id": false, "process.pid": false,
	} {
		if m.publishedWins(key) != want {
			t.Errorf("%s: %v", key, !want)
		}
	}
}

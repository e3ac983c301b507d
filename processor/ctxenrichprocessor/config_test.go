// SPDX-License-Identifier: Apache-2.0

package ctxenrichprocessor

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
		{component.MustNewID("ctx_enrich"), &Config{
			Extension: component.MustNewID("process_ctx"),
			ResourceMerge: ResourceMergeConfig{
				PublishedWins: []string{"service.", "deployment.", "telemetry.sdk."},
				OtherKeys:     OtherKeysInsert,
			},
			MatchWindow: 500 * time.Microsecond,
		}},
		{component.MustNewIDWithName("ctx_enrich", "custom"), &Config{
			Extension: component.MustNewIDWithName("process_ctx", "host"),
			ResourceMerge: ResourceMergeConfig{
				PublishedWins: []string{"service.", "host.name"},
				OtherKeys:     OtherKeysIgnore,
			},
			MatchWindow:   2 * time.Millisecond,
			OverrideLinks: true,
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

// A configuration still naming receiver: loads, and is refused with a
// pointer to extension:.
func TestLoadFormerReceiverKey(t *testing.T) {
	t.Parallel()
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := cm.Sub("ctx_enrich/former")
	if err != nil {
		t.Fatal(err)
	}
	cfg := createDefaultConfig().(*Config)
	if err := sub.Unmarshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := confmap.Validate(cfg); err == nil || !strings.Contains(err.Error(),
		"receiver is replaced by extension: the catalog is the process_ctx extension's; write extension: process_ctx/host") {
		t.Fatalf("Validate: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		mut  func(*Config)
		want string
	}{
		"no extension":    {func(c *Config) { c.Extension = component.ID{} }, "extension must name the process_ctx extension"},
		"wrong extension": {func(c *Config) { c.Extension = component.MustNewID("otlp") }, `got "otlp"`},
		"receiver": {func(c *Config) { c.Receiver = component.MustNewID("process_ctx") },
			"receiver is replaced by extension: the catalog is the process_ctx extension's; write extension: process_ctx"},
		"window":         {func(c *Config) { c.MatchWindow = 0 }, "match_window must be in (0, 10ms], got 0s"},
		"wide window":    {func(c *Config) { c.MatchWindow = time.Second }, "match_window must be in (0, 10ms], got 1s"},
		"max_record_age": {func(c *Config) { c.MaxRecordAge = time.Second }, "max_record_age is removed"},
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

// TestPolicy: the join gets the configuration's settings, other_keys as
// whether to insert.
func TestPolicy(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.OverrideLinks = true
	p := cfg.policy()
	if p.MatchWindow != DefaultMatchWindow || !p.OverrideLinks || !p.InsertOtherKeys || len(p.PublishedWins) != 3 {
		t.Errorf("default policy %+v", p)
	}
	cfg.ResourceMerge.OtherKeys = OtherKeysIgnore
	if cfg.policy().InsertOtherKeys {
		t.Error("other_keys: ignore inserts")
	}
}

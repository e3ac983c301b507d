// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// profilingKeys are the settings of the OTel eBPF profiler's `profiling`
// receiver (its collector/config.Config, mapstructure names).
var profilingKeys = []string{
	"reporter_interval", "monitor_interval", "samples_per_second", "probabilistic_interval",
	"probabilistic_threshold", "tracers", "clock_sync_interval", "send_error_frames", "send_idle_frames",
	"verbose_mode", "off_cpu_threshold", "include_env_vars", "probe_links", "load_probe", "map_scale_factor",
	"go_labels_map_scale_factor", "bpf_verifier_log_level", "no_kernel_version_check", "max_grpc_retries",
	"max_rpc_msg_size",
}

// TestProfilerRecipe: the configuration for the profiler's released
// distribution sets only keys its `profiling` receiver has, and its
// exporter and pipeline pass `otelcol-otelctx validate` (the same OTLP
// exporter) with the receiver swapped for an OTLP one; it sends to the
// production configuration's OTLP receiver.
func TestProfilerRecipe(t *testing.T) {
	bin := testenv.DistBinary(t)
	text := readRepoFile(t, "deploy/profiler/otelcol-ebpf-profiler.yaml")
	var cfg map[string]any
	if err := yaml.UnmarshalStrict([]byte(text), &cfg); err != nil {
		t.Fatal(err)
	}
	recv, _ := cfg["receivers"].(map[string]any)
	prof, ok := recv["profiling"].(map[string]any)
	if !ok {
		t.Fatal("no profiling receiver")
	}
	for k := range prof {
		if !slices.Contains(profilingKeys, k) {
			t.Errorf("receivers::profiling::%s is not a setting of the profiling receiver", k)
		}
	}
	// The exporter's endpoint is where the production configuration listens.
	var exp struct {
		Exporters map[string]struct {
			Endpoint string `json:"endpoint"`
		} `json:"exporters"`
	}
	if err := yaml.Unmarshal([]byte(text), &exp); err != nil {
		t.Fatal(err)
	}
	var prod struct {
		Receivers struct {
			OTLP struct {
				Protocols struct {
					GRPC struct {
						Endpoint string `json:"endpoint"`
					} `json:"grpc"`
				} `json:"protocols"`
			} `json:"otlp"`
		} `json:"receivers"`
	}
	if err := yaml.Unmarshal([]byte(readRepoFile(t, productionConfig)), &prod); err != nil {
		t.Fatal(err)
	}
	if len(exp.Exporters) != 1 {
		t.Fatalf("%d exporters, want the one to otelctx", len(exp.Exporters))
	}
	for id, e := range exp.Exporters {
		if e.Endpoint != prod.Receivers.OTLP.Protocols.GRPC.Endpoint {
			t.Errorf("exporter %s sends to %s, otelctx's production configuration listens on %s", id, e.Endpoint, prod.Receivers.OTLP.Protocols.GRPC.Endpoint)
		}
	}

	// Everything but the receiver, validated by a collector that has the
	// same exporter.
	recv["otlp"] = map[string]any{"protocols": map[string]any{"grpc": map[string]any{"endpoint": "127.0.0.1:0"}}}
	delete(recv, "profiling")
	pipes := cfg["service"].(map[string]any)["pipelines"].(map[string]any)
	for _, p := range pipes {
		p.(map[string]any)["receivers"] = []any{"otlp"}
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "recipe.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "validate", "--config", path, "--feature-gates=service.profilesSupport").CombinedOutput(); err != nil {
		t.Errorf("validate (profiling receiver swapped for otlp): %v\n%s\n%s", err, out, b)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package distrun

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

var shapes = map[string]Config{
	"defaults": {},
	"entities": {PIDs: []int{1, 2}, CollectionInterval: 200 * time.Millisecond, ThreadSampler: "off",
		EntityInterval: time.Minute, EventFormat: "spec", Entities: "/tmp/e.jsonl"},
	"profiles": {PIDs: []int{1}, ThreadSampler: "ebpf", FrequencyHz: 997, Entities: "/tmp/e.jsonl",
		Profiles: &Profiles{GRPC: "127.0.0.1:4317", HTTP: "127.0.0.1:4318", Path: "/tmp/p.jsonl"}},
	"profiles, debug": {Profiles: &Profiles{GRPC: "127.0.0.1:4317", Path: "/tmp/p.jsonl"}},
	"profiles, cpu_time": {Profiles: &Profiles{GRPC: "127.0.0.1:4317", Path: "/tmp/p.jsonl",
		CPUTime: &CPUTime{FlushInterval: time.Second, Metrics: "/tmp/m.jsonl", Logs: "/tmp/l.jsonl"}}},
	"health": {Health: "127.0.0.1:13199", ReadTimeout: time.Hour, StallTimeout: time.Second,
		CollectionInterval: 100 * time.Millisecond, DiscoveryInterval: 200 * time.Millisecond},
}

// Every shape is a configuration the built distribution accepts.
func TestConfigValidates(t *testing.T) {
	bin := testenv.DistBinary(t)
	for name, cfg := range shapes {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			writeConfig(t, path, cfg)
			args := []string{"validate", "--config", path}
			if cfg.Profiles != nil {
				args = append(args, ProfilesGate)
			}
			if cfg.Health != "" {
				args = append(args, HealthGate)
			}
			if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
				t.Errorf("%s validate: %v\n%s\nconfig:\n%s", bin, err, out, cfg.YAML())
			}
		})
	}
}

// The extension and receiver sections hold what was set, or {}.
func TestConfigYAML(t *testing.T) {
	for name, want := range map[string][]string{
		"defaults": {"extensions:\n  process_ctx: {}\nreceivers:\n  process_ctx: {}\n", "exporters: [debug]"},
		"entities": {"    collection_interval: 200ms\n    thread_sampler: off\n    include:\n      pids: [1, 2]\n",
			"    entity_interval: 1m0s\n    event_format: spec\n", "exporters: [file/entities]"},
		"profiles": {"    thread_context:\n      frequency_hz: 997\n", "      http:\n        endpoint: 127.0.0.1:4318\n",
			"processors: [ctx_enrich]"},
		"profiles, cpu_time": {"connectors:\n  cpu_time:\n    metrics_flush_interval: 1s\n    span_records:\n      flush_interval: 1s\n",
			"exporters: [file/profiles, cpu_time]", "receivers: [cpu_time]\n      exporters: [file/cputime_metrics]"},
	} {
		got := shapes[name].YAML()
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: no %q in\n%s", name, w, got)
			}
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxextension

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

	"github.com/otelctx/otelctx/extension/processctxextension/internal/metadata"
)

func loadConfig(t *testing.T, name string) *Config {
	t.Helper()
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := createDefaultConfig().(*Config)
	if err := componenttest.CheckConfigStruct(cfg); err != nil {
		t.Fatal(err)
	}
	sub, err := cm.Sub(component.NewIDWithName(metadata.Type, name).String())
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Unmarshal(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	def := loadConfig(t, "")
	if err := confmap.Validate(def); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	if !reflect.DeepEqual(def, createDefaultConfig()) {
		t.Fatalf("an empty process_ctx: is not the default configuration: %+v", def)
	}
	wantDef := &Config{
		CollectionInterval: 10 * time.Second,
		DiscoveryInterval:  30 * time.Second,
		RecheckInterval:    time.Minute,
		ExitedRetention:    time.Minute,
		MinRescanInterval:  250 * time.Millisecond,
		ReadTimeout:        time.Second,
		StallTimeout:       time.Minute,
		Limits: LimitsConfig{MaxPayloadSize: 64 << 10, MaxAttributes: 128, MaxAttributeValueLength: 4096, MaxProcesses: 16384,
			MaxProcessMemory: 64 << 20, MaxRetainedProcesses: 4096, MaxThreadsPerProcess: 1024, MaxThreads: 65536, MaxRunsPerThread: 4096, MaxRuns: 262144},
		ThreadSampler: ThreadSamplerAuto,
		ThreadContext: ThreadContextConfig{Interval: 30 * time.Second, ReadCap: 640, FrequencyHz: 97,
			FollowPrograms: []string{"native_tracer_entry"}},
		DDOtelCtx:           DDOtelCtxConfig{Processes: DDProcessesNone},
		EnvironmentResource: true,
	}
	if !reflect.DeepEqual(def, wantDef) {
		t.Fatalf("defaults\n%+v\nwant\n%+v", def, wantDef)
	}

	c := loadConfig(t, "custom")
	if err := confmap.Validate(c); err != nil {
		t.Fatalf("custom config invalid: %v", err)
	}
	want := &Config{
		CollectionInterval: 2 * time.Second,
		DiscoveryInterval:  7 * time.Second,
		RecheckInterval:    30 * time.Second,
		ExitedRetention:    20 * time.Second,
		MinRescanInterval:  time.Second,
		ReadTimeout:        250 * time.Millisecond,
		StallTimeout:       2 * time.Minute,
		Include:            MatchConfig{Executables: []string{"java", "python3*"}, PIDs: []int{1234}},
		Exclude:            MatchConfig{Executables: []string{"otelcol*"}},
		Limits: LimitsConfig{MaxPayloadSize: 8192, MaxAttributes: 64, MaxAttributeValueLength: 1024, MaxProcesses: 100, MaxProcessMemory: 8 << 20,
			MaxRetainedProcesses: 50, MaxThreadsPerProcess: 64, MaxThreads: 2048, MaxRunsPerThread: 256, MaxRuns: 100000},
		ThreadSampler: ThreadSamplerPtrace,
		ThreadContext: ThreadContextConfig{Interval: 5 * time.Second, ReadCap: 4096, FrequencyHz: 49, OffCPU: true,
			FollowPrograms: []string{"my_profiler_entry"}},
		DDOtelCtx:           DDOtelCtxConfig{Processes: DDProcessesAll},
		EnvironmentResource: false,
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", c, want)
	}
	// The former thread_context.mode is refused with a pointer to thread_sampler.
	if err := confmap.Validate(loadConfig(t, "oldmode")); err == nil || !strings.Contains(err.Error(), "thread_context.mode is replaced by thread_sampler") {
		t.Fatalf("thread_context.mode: %v", err)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	err := confmap.Validate(loadConfig(t, "invalid"))
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{
		"collection_interval must be at least 10ms, got 0s",
		`include.executables: invalid pattern "[bad"`,
		"include.pids: -3 is not a valid PID",
		"min_rescan_interval must be in [10ms, 1m0s], got 2m0s",
		"read_timeout must be in [1ms, 1h0m0s], got 0s",
		"stall_timeout must be in [100ms, 24h0m0s], got 48h0m0s",
		"limits.max_payload_size must be in [1, 16777216], got 0",
		"limits.max_runs must be in [1, 67108864], got 0",
		"thread_context.read_cap must be at most 1024 with thread_sampler: auto",
		`dd_otel_ctx.processes must be "java", "all" or "none", got "jvm"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"strings"
	"testing"
	"time"

	"github.com/otelctx/otelctx/internal/scan/ddscan"
)

// The scanner's DD mode follows dd_otel_ctx.processes, and is none without
// thread sampling: no buffer is searched for then.
func TestDDMode(t *testing.T) {
	t.Parallel()
	cfg := NewDefaultConfig()
	if cfg.DDOtelCtx.Processes != DDProcessesNone || cfg.ddMode() != ddscan.SearchNone {
		t.Fatalf("default dd_otel_ctx: %+v", cfg.DDOtelCtx)
	}
	cfg.DDOtelCtx.Processes = DDProcessesJava
	if cfg.DDOtelCtx.mode() != ddscan.SearchJava || cfg.ddMode() != ddscan.SearchJava {
		t.Fatalf("dd_otel_ctx java: %v", cfg.ddMode())
	}
	cfg.DDOtelCtx.Processes = DDProcessesAll
	if cfg.DDOtelCtx.mode() != ddscan.SearchAll || cfg.ddMode() != ddscan.SearchAll {
		t.Fatalf("dd_otel_ctx all: %v", cfg.ddMode())
	}
	cfg.ThreadSampler = ThreadSamplerOff
	if cfg.ddMode() != ddscan.SearchNone {
		t.Fatalf("thread_sampler off: dd mode %v", cfg.ddMode())
	}
	cfg.ThreadSampler, cfg.DDOtelCtx.Processes = ThreadSamplerAuto, DDProcessesNone
	if cfg.ddMode() != ddscan.SearchNone {
		t.Fatalf("dd_otel_ctx none: dd mode %v", cfg.ddMode())
	}
}

func TestValidateIntervals(t *testing.T) {
	t.Parallel()
	cfg := NewDefaultConfig()
	cfg.DiscoveryInterval = 5 * time.Second
	cfg.RecheckInterval = time.Second
	err := cfg.Validate()
	for _, want := range []string{
		"discovery_interval (5s) must be at least collection_interval (10s)",
		"recheck_interval (1s) must be at least discovery_interval (5s)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}

func TestDiscoverEvery(t *testing.T) {
	cfg := NewDefaultConfig()
	for _, tc := range []struct {
		collection, discovery time.Duration
		want                  int
	}{
		{10 * time.Second, 30 * time.Second, 3},
		{10 * time.Second, 10 * time.Second, 1},
		{10 * time.Second, 25 * time.Second, 3}, // rounded up
	} {
		cfg.CollectionInterval, cfg.DiscoveryInterval = tc.collection, tc.discovery
		if got := cfg.discoverEvery(); got != tc.want {
			t.Errorf("discoverEvery(%v, %v) = %d, want %d", tc.collection, tc.discovery, got, tc.want)
		}
	}
}

func TestFilter(t *testing.T) {
	cfg := NewDefaultConfig()
	if cfg.filter() != nil {
		t.Fatal("no include/exclude must mean no filter")
	}
	cfg.Include = MatchConfig{Executables: []string{"java", "python3*"}, PIDs: []int{42}}
	cfg.Exclude = MatchConfig{Executables: []string{"python3.9"}, PIDs: []int{7}}
	f := cfg.filter()
	for _, tc := range []struct {
		pid  int
		exe  string
		want bool
	}{
		{1, "java", true},
		{1, "python3.12", true},
		{1, "python3.9", false}, // excluded wins
		{42, "bash", true},      // included by PID
		{7, "java", false},      // excluded by PID
		{1, "node", false},      // not included
	} {
		if got := f(tc.pid, tc.exe); got != tc.want {
			t.Errorf("filter(%d, %q) = %v, want %v", tc.pid, tc.exe, got, tc.want)
		}
	}
}

// The catalog's bounds are settings; each is checked, and the watcher
// gives them to its catalog.
func TestCatalogLimits(t *testing.T) {
	t.Parallel()
	cfg := NewDefaultConfig()
	cfg.Limits.MaxThreadsPerProcess, cfg.Limits.MaxThreads, cfg.Limits.MaxRunsPerThread, cfg.Limits.MaxRuns = 0, 1<<23, -1, 1<<27
	cfg.Limits.MaxProcessMemory = 1 << 20
	err := cfg.Validate()
	for _, want := range []string{
		"limits.max_process_memory must be in [4194304, 17179869184] bytes, got 1048576",
		"limits.max_threads_per_process must be in [1, 4194304], got 0",
		"limits.max_threads must be in [1, 4194304], got 8388608",
		"limits.max_runs_per_thread must be in [1, 67108864], got -1",
		"limits.max_runs must be in [1, 67108864], got 134217728",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
	cfg = NewDefaultConfig()
	cfg.Limits.MaxRetainedProcesses, cfg.Limits.MaxThreads, cfg.Limits.MaxRuns = 7, 300, 5000
	cfg.Limits.MaxThreadsPerProcess, cfg.Limits.MaxRunsPerThread = 30, 64
	cfg.Limits.MaxProcessMemory = 8 << 20
	w, err := New(Settings{}, *cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o := w.Catalog().Occupancy(); o.MaxRetained != 7 || o.MaxThreads != 300 || o.MaxRuns != 5000 || o.MaxThreadsPerProcess != 30 || o.MaxRunsPerThread != 64 {
		t.Errorf("catalog bounds %+v", o)
	}
	if o := w.Catalog().Occupancy(); o.MaxRetainedMemory != 3<<19 {
		t.Errorf("retained exits' memory bound %d, want 3/16 of max_process_memory", o.MaxRetainedMemory)
	}
	if st := w.Catalog().EnvStats(); st.MaxMemory != 3<<19 {
		t.Errorf("environment cache's memory bound %d, want 3/16 of max_process_memory", st.MaxMemory)
	}
	if got := cfg.Limits.resolutionMemory(); got != 1<<20 {
		t.Errorf("TLS resolutions' memory bound %d, want 1/8 of max_process_memory", got)
	}
}

package processctxreceiver

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

func loadConfig(t *testing.T, name string) *Config {
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
	if err := sub.Unmarshal(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestLoadConfig(t *testing.T) {
	def := loadConfig(t, "")
	if err := confmap.Validate(def); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	if def.CollectionInterval != 10*time.Second || def.EntityInterval != 5*time.Minute || def.Limits.MaxPayloadSize != 64<<10 ||
		def.DDOtelCtx.Processes != DDProcessesJava || def.DDOtelCtx.mode() != scan.DDJava {
		t.Fatalf("unexpected defaults: %+v", def)
	}

	c := loadConfig(t, "custom")
	if err := confmap.Validate(c); err != nil {
		t.Fatalf("custom config invalid: %v", err)
	}
	want := &Config{
		CollectionInterval: 2 * time.Second,
		DiscoveryInterval:  7 * time.Second,
		EntityInterval:     time.Minute,
		RecheckInterval:    30 * time.Second,
		ExitedRetention:    20 * time.Second,
		Include:            MatchConfig{Executables: []string{"java", "python3*"}, PIDs: []int{1234}},
		Exclude:            MatchConfig{Executables: []string{"otelcol*"}},
		Limits: LimitsConfig{MaxPayloadSize: 8192, MaxAttributes: 64, MaxAttributeValueLength: 1024, MaxProcesses: 100,
			MaxRetainedProcesses: 50},
		ThreadSampler: ThreadSamplerPtrace,
		ThreadContext: ThreadContextConfig{Interval: 5 * time.Second, ReadCap: 256, FrequencyHz: 49, OffCPU: true,
			FollowPrograms: []string{"my_profiler_entry"}},
		DDOtelCtx: DDOtelCtxConfig{Processes: DDProcessesAll},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", c, want)
	}
	if c.DDOtelCtx.Processes != DDProcessesAll || c.DDOtelCtx.mode() != scan.DDAll || c.ddMode() != scan.DDAll {
		t.Fatalf("dd_otel_ctx: %+v", c.DDOtelCtx)
	}
	// Without thread sampling, no buffer is searched for.
	c.ThreadSampler = ThreadSamplerOff
	if c.ddMode() != scan.DDNone {
		t.Fatalf("thread_sampler off: dd mode %v", c.ddMode())
	}
	// The former thread_context.mode is refused with a pointer to thread_sampler.
	if err := confmap.Validate(loadConfig(t, "oldmode")); err == nil || !strings.Contains(err.Error(), "thread_context.mode is replaced by thread_sampler") {
		t.Fatalf("thread_context.mode: %v", err)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	err := confmap.Validate(loadConfig(t, "invalid"))
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{
		"collection_interval must be at least 10ms, got 0s",
		`include.executables: invalid pattern "[bad"`,
		"include.pids: -3 is not a valid PID",
		"limits.max_payload_size must be in [1, 16777216], got 0",
		`dd_otel_ctx.processes must be "java", "all" or "none", got "jvm"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestValidateIntervals(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.EntityInterval = time.Second
	cfg.DiscoveryInterval = 5 * time.Second
	err := cfg.Validate()
	for _, want := range []string{
		"entity_interval (1s) must be at least collection_interval (10s)",
		"discovery_interval (5s) must be at least collection_interval (10s)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %q", err, want)
		}
	}
}

func TestDiscoverEvery(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
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
	cfg := createDefaultConfig().(*Config)
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

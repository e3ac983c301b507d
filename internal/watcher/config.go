// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"time"

	"go.opentelemetry.io/collector/component"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/catalogview"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/threadsource"
)

// Config is the configuration of a Watcher: the process_ctx extension's
// configuration (extension/processctxextension aliases it).
type Config struct {
	// CollectionInterval is how often known publishers are polled (one
	// 8-byte read each) and exits are noticed.
	CollectionInterval time.Duration `mapstructure:"collection_interval"`
	// DiscoveryInterval is how often /proc is listed for new processes. It
	// is the only part whose cost grows with every process on the host, so
	// it runs less often than the poll; it is rounded up to a multiple of
	// collection_interval.
	DiscoveryInterval time.Duration `mapstructure:"discovery_interval"`
	// RecheckInterval caps the backoff with which a process that does not
	// publish (yet) is looked at again.
	RecheckInterval time.Duration `mapstructure:"recheck_interval"`
	// ExitedRetention is how long an exited process's context and thread
	// histories stay joinable: profiles reach the collector seconds after
	// their samples were taken, often after the process exited.
	ExitedRetention time.Duration `mapstructure:"exited_retention"`
	// MinRescanInterval is the least time between two looks at one process
	// that prctl events ask for (any process can call prctl in a loop): a
	// tracked publisher named again sooner is polled once it has passed.
	MinRescanInterval time.Duration `mapstructure:"min_rescan_interval"`
	// Include, when not empty, restricts the processes looked at.
	Include MatchConfig `mapstructure:"include"`
	// Exclude removes processes from those looked at.
	Exclude MatchConfig  `mapstructure:"exclude"`
	Limits  LimitsConfig `mapstructure:"limits"`
	// ThreadSampler chooses how thread contexts (OTEP 4947) are read: auto
	// (default: eBPF, following a profiler while one runs, else own ticks;
	// off with a warning if the kernel refuses eBPF: ptrace is opt-in),
	// follow, ebpf, ptrace or off.
	ThreadSampler string `mapstructure:"thread_sampler"`
	// ThreadContext holds the samplers' parameters.
	ThreadContext ThreadContextConfig `mapstructure:"thread_context"`
	// DDOtelCtx configures the Datadog DD_OTEL_CTX thread-context source.
	DDOtelCtx DDOtelCtxConfig `mapstructure:"dd_otel_ctx"`
	// ReadTimeout bounds every read of another process's memory: a read
	// past it is abandoned and its process quarantined (a page waiting on
	// a FUSE server or a userfaultfd handler). It applies to every watcher
	// of the collector (the last started sets it).
	ReadTimeout time.Duration `mapstructure:"read_timeout"`
	// StallTimeout is how long a round or a reader may stay busy before
	// the extension reports itself unhealthy (a recoverable error: the
	// health_check extension answers 500, and the orchestrator restarts
	// the collector). Keep it above 32 × read_timeout: that is what the
	// most hung reads (32) can add to a round.
	StallTimeout time.Duration `mapstructure:"stall_timeout"`
	// EnvironmentResource makes the environment a second source of a
	// process's resource: for a PID that data names and that publishes no
	// process context, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES from
	// /proc/PID/environ (read once per process, time-bounded); for a
	// publisher, they fill what its published resource lacks.
	EnvironmentResource bool `mapstructure:"environment_resource"`
	// CatalogEndpoint, when set, serves the catalog's view for
	// `otelctx list --from` (internal/catalogview): unix:/PATH or a
	// loopback HOST:PORT. Off by default.
	CatalogEndpoint string `mapstructure:"catalog_endpoint"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// NewDefaultConfig is the default configuration.
func NewDefaultConfig() *Config {
	l := processctx.DefaultLimits()
	return &Config{
		CollectionInterval: 10 * time.Second,
		DiscoveryInterval:  30 * time.Second,
		RecheckInterval:    time.Minute,
		ExitedRetention:    catalog.DefaultRetention,
		MinRescanInterval:  250 * time.Millisecond,
		ReadTimeout:        time.Second,
		StallTimeout:       time.Minute,
		Limits: LimitsConfig{
			MaxPayloadSize:          l.MaxPayloadSize,
			MaxAttributes:           l.MaxAttributes,
			MaxAttributeValueLength: l.MaxValueLength,
			MaxProcesses:            16384,
			MaxProcessMemory:        DefaultMaxProcessMemory,
			MaxRetainedProcesses:    catalog.DefaultMaxRetained,
			MaxThreadsPerProcess:    catalog.DefaultMaxThreadsPerProcess,
			MaxThreads:              catalog.DefaultMaxThreads,
			MaxRunsPerThread:        catalog.DefaultHistoryDepth,
			MaxRuns:                 catalog.DefaultMaxEntries,
		},
		ThreadSampler: ThreadSamplerAuto,
		ThreadContext: threadsource.DefaultConfig(),
		DDOtelCtx:     defaultDDOtelCtxConfig(),

		EnvironmentResource: true,
	}
}

// MatchConfig selects processes by executable name or PID.
type MatchConfig struct {
	// Executables are glob patterns (path.Match) on the executable's base
	// name, e.g. "java", "python3*".
	Executables []string `mapstructure:"executables"`
	// PIDs are process IDs in the collector's PID namespace.
	PIDs []int `mapstructure:"pids"`
}

func (m MatchConfig) empty() bool { return len(m.Executables) == 0 && len(m.PIDs) == 0 }

func (m MatchConfig) matches(pid int, exe string) bool {
	if slices.Contains(m.PIDs, pid) {
		return true
	}
	for _, p := range m.Executables {
		if ok, _ := path.Match(p, exe); ok {
			return true
		}
	}
	return false
}

// LimitsConfig bounds what one publisher can cost.
type LimitsConfig struct {
	// MaxPayloadSize bounds a context's payload_size; larger ones are refused.
	MaxPayloadSize uint32 `mapstructure:"max_payload_size"`
	// MaxAttributes bounds the entries kept per attribute list; extra ones
	// are dropped and counted in dropped_attributes_count.
	MaxAttributes int `mapstructure:"max_attributes"`
	// MaxAttributeValueLength truncates longer string values (bytes).
	MaxAttributeValueLength int `mapstructure:"max_attribute_value_length"`
	// MaxProcesses bounds the publishers tracked at once.
	MaxProcesses int `mapstructure:"max_processes"`
	// MaxProcessMemory bounds what is held per process, in bytes: half
	// for the tracked publishers' decoded contexts, 3/16 for the retained
	// exits, 3/16 for the environment cache, each shared per share (the
	// process's container, user namespace creator or UID): at a bound the
	// share holding the most gives up its own for another's; and 1/8 for
	// the TLS resolutions in flight (refused past it, never allocated).
	MaxProcessMemory int64 `mapstructure:"max_process_memory"`
	// MaxRetainedProcesses bounds the exited publishers kept for
	// exited_retention; past it the executable with the most exits kept
	// forgets its oldest.
	MaxRetainedProcesses int `mapstructure:"max_retained_processes"`
	// MaxThreadsPerProcess bounds the threads with a history kept per
	// process; past it its least recently observed thread is forgotten.
	MaxThreadsPerProcess int `mapstructure:"max_threads_per_process"`
	// MaxThreads bounds the threads kept in all; past it the process
	// holding the most gives one up.
	MaxThreads int `mapstructure:"max_threads"`
	// MaxRunsPerThread bounds a thread's history, in runs (a run: the same
	// record observed until it changes); past it the oldest is overwritten.
	MaxRunsPerThread int `mapstructure:"max_runs_per_thread"`
	// MaxRuns bounds the runs kept in all; past it the process holding the
	// most gives one up.
	MaxRuns int `mapstructure:"max_runs"`
}

// DefaultMaxProcessMemory is limits.max_process_memory's default: 64 MiB,
// which beside the catalog's runs (under 100 MiB at the production
// configuration's max_runs) and the collector itself keeps the agent
// inside the DaemonSet's 256 MiB limit (docs/operating.md, memory).
const DefaultMaxProcessMemory = 64 << 20

// The shares of MaxProcessMemory (Validate keeps it in range).
func (l LimitsConfig) contextMemory() int      { return int(l.MaxProcessMemory / 2) }
func (l LimitsConfig) retainedMemory() int     { return int(l.MaxProcessMemory * 3 / 16) }
func (l LimitsConfig) environmentMemory() int  { return int(l.MaxProcessMemory * 3 / 16) }
func (l LimitsConfig) resolutionMemory() int64 { return l.MaxProcessMemory / 8 }

// Bounds that keep a configuration from making limits meaningless.
const (
	minCollectionInterval = 10 * time.Millisecond
	maxPayloadSizeCeiling = 16 << 20
	maxAttributesCeiling  = 1 << 16
	maxValueLenCeiling    = 1 << 20
	maxProcessesCeiling   = 1 << 20
	minProcessMemory      = 4 << 20
	maxProcessMemory      = 16 << 30
	maxThreadsCeiling     = 1 << 22
	maxRunsCeiling        = 1 << 26
	maxExitedRetention    = time.Hour
	maxMinRescanInterval  = time.Minute
	minReadTimeout        = time.Millisecond
	maxReadTimeout        = time.Hour
	minStallTimeout       = 100 * time.Millisecond
	maxStallTimeout       = 24 * time.Hour
)

var _ component.Config = (*Config)(nil)

// Validate reports every problem in the configuration at once.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.CollectionInterval < minCollectionInterval {
		errs = append(errs, fmt.Errorf("collection_interval must be at least %v, got %v", minCollectionInterval, cfg.CollectionInterval))
	}
	if cfg.DiscoveryInterval < cfg.CollectionInterval {
		errs = append(errs, fmt.Errorf("discovery_interval (%v) must be at least collection_interval (%v)", cfg.DiscoveryInterval, cfg.CollectionInterval))
	}
	if cfg.RecheckInterval < cfg.DiscoveryInterval {
		errs = append(errs, fmt.Errorf("recheck_interval (%v) must be at least discovery_interval (%v)", cfg.RecheckInterval, cfg.DiscoveryInterval))
	}
	if cfg.MinRescanInterval < minCollectionInterval || cfg.MinRescanInterval > maxMinRescanInterval {
		errs = append(errs, fmt.Errorf("min_rescan_interval must be in [%v, %v], got %v", minCollectionInterval, maxMinRescanInterval, cfg.MinRescanInterval))
	}
	if cfg.ExitedRetention < 0 || cfg.ExitedRetention > maxExitedRetention {
		errs = append(errs, fmt.Errorf("exited_retention must be in [0, %v], got %v", maxExitedRetention, cfg.ExitedRetention))
	}
	if cfg.ReadTimeout < minReadTimeout || cfg.ReadTimeout > maxReadTimeout {
		errs = append(errs, fmt.Errorf("read_timeout must be in [%v, %v], got %v", minReadTimeout, maxReadTimeout, cfg.ReadTimeout))
	}
	if cfg.StallTimeout < minStallTimeout || cfg.StallTimeout > maxStallTimeout {
		errs = append(errs, fmt.Errorf("stall_timeout must be in [%v, %v], got %v", minStallTimeout, maxStallTimeout, cfg.StallTimeout))
	}
	errs = append(errs, cfg.Include.validate("include")...)
	errs = append(errs, cfg.Exclude.validate("exclude")...)
	l := cfg.Limits
	if l.MaxPayloadSize < 1 || l.MaxPayloadSize > maxPayloadSizeCeiling {
		errs = append(errs, fmt.Errorf("limits.max_payload_size must be in [1, %d], got %d", maxPayloadSizeCeiling, l.MaxPayloadSize))
	}
	if l.MaxAttributes < 1 || l.MaxAttributes > maxAttributesCeiling {
		errs = append(errs, fmt.Errorf("limits.max_attributes must be in [1, %d], got %d", maxAttributesCeiling, l.MaxAttributes))
	}
	if l.MaxAttributeValueLength < 1 || l.MaxAttributeValueLength > maxValueLenCeiling {
		errs = append(errs, fmt.Errorf("limits.max_attribute_value_length must be in [1, %d], got %d", maxValueLenCeiling, l.MaxAttributeValueLength))
	}
	if l.MaxProcesses < 1 || l.MaxProcesses > maxProcessesCeiling {
		errs = append(errs, fmt.Errorf("limits.max_processes must be in [1, %d], got %d", maxProcessesCeiling, l.MaxProcesses))
	}
	if l.MaxProcessMemory < minProcessMemory || l.MaxProcessMemory > maxProcessMemory {
		errs = append(errs, fmt.Errorf("limits.max_process_memory must be in [%d, %d] bytes, got %d", int64(minProcessMemory), int64(maxProcessMemory), l.MaxProcessMemory))
	}
	if l.MaxRetainedProcesses < 0 || l.MaxRetainedProcesses > maxProcessesCeiling {
		errs = append(errs, fmt.Errorf("limits.max_retained_processes must be in [0, %d], got %d", maxProcessesCeiling, l.MaxRetainedProcesses))
	}
	errs = append(errs, l.validateCatalog()...)
	errs = append(errs, threadsource.Validate(cfg.ThreadSampler, cfg.ThreadContext)...)
	errs = append(errs, cfg.DDOtelCtx.validate()...)
	if err := catalogview.ValidateEndpoint(cfg.CatalogEndpoint); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateCatalog checks the catalog's bounds.
func (l LimitsConfig) validateCatalog() []error {
	var errs []error
	for _, b := range []struct {
		key     string
		v, ceil int
	}{
		{"max_threads_per_process", l.MaxThreadsPerProcess, maxThreadsCeiling},
		{"max_threads", l.MaxThreads, maxThreadsCeiling},
		{"max_runs_per_thread", l.MaxRunsPerThread, maxRunsCeiling},
		{"max_runs", l.MaxRuns, maxRunsCeiling},
	} {
		if b.v < 1 || b.v > b.ceil {
			errs = append(errs, fmt.Errorf("limits.%s must be in [1, %d], got %d", b.key, b.ceil, b.v))
		}
	}
	return errs
}

func (m MatchConfig) validate(section string) []error {
	var errs []error
	for _, p := range m.Executables {
		if _, err := path.Match(p, ""); err != nil {
			errs = append(errs, fmt.Errorf("%s.executables: invalid pattern %q: %w", section, p, err))
		}
	}
	for _, pid := range m.PIDs {
		if pid <= 0 {
			errs = append(errs, fmt.Errorf("%s.pids: %d is not a valid PID", section, pid))
		}
	}
	return errs
}

// filter builds the scanner's process filter; nil when nothing is filtered.
func (cfg *Config) filter() func(pid int, exe string) bool {
	if cfg.Include.empty() && cfg.Exclude.empty() {
		return nil
	}
	inc, exc := cfg.Include, cfg.Exclude
	return func(pid int, exe string) bool {
		if !inc.empty() && !inc.matches(pid, exe) {
			return false
		}
		return !exc.matches(pid, exe)
	}
}

// Filter is include and exclude as a test of a process's PID and
// executable base name; nil when they select every process.
func (cfg *Config) Filter() func(pid int, exe string) bool { return cfg.filter() }

// discoverEvery is how many poll rounds make one discovery round.
func (cfg *Config) discoverEvery() int {
	return max(1, int((cfg.DiscoveryInterval+cfg.CollectionInterval-1)/cfg.CollectionInterval))
}

func (cfg *Config) limits() processctx.Limits {
	l := processctx.DefaultLimits()
	l.MaxPayloadSize = cfg.Limits.MaxPayloadSize
	l.MaxAttributes = cfg.Limits.MaxAttributes
	l.MaxValueLength = cfg.Limits.MaxAttributeValueLength
	return l
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package distrun

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ProfilesGate: the feature gate the profiles pipeline needs.
const ProfilesGate = "--feature-gates=service.profilesSupport"

// HealthGate: the feature gate with which health_check answers from the
// components' status (the process_ctx extension's stall reports).
const HealthGate = "--feature-gates=extension.healthcheck.useComponentStatus"

// ProductionGates: the feature gates the production configuration runs
// with, as the DaemonSet, the systemd unit and the image pass them.
const ProductionGates = "--feature-gates=service.profilesSupport,extension.healthcheck.useComponentStatus"

// StartConfig writes cfg to dir/config.yaml and starts bin on it (its log
// in dir/collector.log), with ProfilesGate when cfg has a profiles pipeline.
func StartConfig(tb testing.TB, bin, dir string, cfg Config) *Collector {
	tb.Helper()
	return StartConfigVia(tb, nil, bin, dir, cfg)
}

// StartConfigVia is StartConfig with bin run by the command prefix (e.g.
// a shell that moves itself into a memory cgroup, then execs bin).
func StartConfigVia(tb testing.TB, prefix []string, bin, dir string, cfg Config) *Collector {
	tb.Helper()
	path := filepath.Join(dir, "config.yaml")
	writeConfig(tb, path, cfg)
	args := []string{"--config", path}
	if cfg.Profiles != nil {
		args = append(args, ProfilesGate)
	}
	if cfg.Health != "" {
		args = append(args, HealthGate)
	}
	if len(prefix) > 0 {
		args = append(append(append([]string(nil), prefix[1:]...), bin), args...)
		bin = prefix[0]
	}
	return Start(tb, bin, filepath.Join(dir, "collector.log"), args...)
}

func writeConfig(tb testing.TB, path string, cfg Config) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(cfg.YAML()), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// Config is the one configuration shape the end-to-end runs use: the
// process_ctx extension, its receiver's entity events to a file (or to the
// debug exporter), and optionally profiles from OTLP through ctx_enrich to a
// file. Zero fields leave the component's default.
type Config struct {
	PIDs               []int         // the extension's include.pids
	CollectionInterval time.Duration // the extension's collection_interval
	DiscoveryInterval  time.Duration // the extension's discovery_interval (and recheck_interval)
	ThreadSampler      string        // the extension's thread_sampler
	FrequencyHz        int           // the extension's thread_context.frequency_hz
	EntityInterval     time.Duration // the receiver's entity_interval
	EventFormat        string        // the receiver's event_format
	// Entities: the file the entity events are written to (OTLP JSON, one
	// batch a line); "" writes them to the debug exporter (the log).
	Entities string
	Profiles *Profiles // nil: no profiles pipeline
	// Health: health_check's HTTP endpoint (status at /, component
	// status mode: a recoverable error is unhealthy at once); "": none.
	Health       string
	ReadTimeout  time.Duration // the extension's read_timeout
	StallTimeout time.Duration // the extension's stall_timeout
	// MetricsPort: the collector's own metrics in Prometheus text on
	// 127.0.0.1:MetricsPort (Metric reads them); 0: none.
	MetricsPort int
}

// Profiles: an OTLP receiver, ctx_enrich, and a file exporter.
type Profiles struct {
	GRPC string // the OTLP receiver's gRPC endpoint
	HTTP string // its HTTP endpoint ("": none)
	Path string // the file the enriched profiles are written to
	// CPUTime: the enriched profiles also go through the cpu_time
	// connector, its metrics and span records to files; nil: no connector.
	CPUTime *CPUTime
}

// CPUTime: the cpu_time connector with its defaults but for the flush
// intervals, its metrics and its span records each to a file (OTLP JSON).
type CPUTime struct {
	FlushInterval time.Duration // metrics_flush_interval and span_records.flush_interval (0: the defaults)
	Metrics, Logs string        // the files
}

// YAML is the collector configuration.
func (c Config) YAML() string {
	var ext, rcv settings
	ext.add(c.CollectionInterval > 0, "collection_interval: %v", c.CollectionInterval)
	ext.add(c.DiscoveryInterval > 0, "discovery_interval: %v\n    recheck_interval: %v", c.DiscoveryInterval, c.DiscoveryInterval)
	ext.add(c.ThreadSampler != "", "thread_sampler: %s", c.ThreadSampler)
	ext.add(c.FrequencyHz > 0, "thread_context:\n      frequency_hz: %d", c.FrequencyHz)
	pids := make([]string, len(c.PIDs))
	for i, p := range c.PIDs {
		pids[i] = strconv.Itoa(p)
	}
	ext.add(len(pids) > 0, "include:\n      pids: [%s]", strings.Join(pids, ", "))
	ext.add(c.ReadTimeout > 0, "read_timeout: %v", c.ReadTimeout)
	ext.add(c.StallTimeout > 0, "stall_timeout: %v", c.StallTimeout)
	rcv.add(c.EntityInterval > 0, "entity_interval: %v", c.EntityInterval)
	rcv.add(c.EventFormat != "", "event_format: %s", c.EventFormat)

	var b strings.Builder
	b.WriteString("extensions:\n  process_ctx:" + ext.String())
	extensions := "process_ctx"
	if c.Health != "" {
		fmt.Fprintf(&b, "  health_check:\n    http:\n      endpoint: %s\n      status:\n        enabled: true\n        path: /\n"+
			"    component_health:\n      include_recoverable_errors: true\n      recovery_duration: 0s\n", c.Health)
		extensions += ", health_check"
	}
	b.WriteString("receivers:\n  process_ctx:" + rcv.String())
	if c.Profiles != nil {
		fmt.Fprintf(&b, "  otlp:\n    protocols:\n      grpc:\n        endpoint: %s\n", c.Profiles.GRPC)
		if c.Profiles.HTTP != "" {
			fmt.Fprintf(&b, "      http:\n        endpoint: %s\n", c.Profiles.HTTP)
		}
		b.WriteString("processors:\n  ctx_enrich:\n    extension: process_ctx\n")
		if ct := c.Profiles.CPUTime; ct != nil {
			var cs settings
			cs.add(ct.FlushInterval > 0, "metrics_flush_interval: %v\n    span_records:\n      flush_interval: %v", ct.FlushInterval, ct.FlushInterval)
			b.WriteString("connectors:\n  cpu_time:" + cs.String())
		}
	}

	b.WriteString("exporters:\n")
	entities := "file/entities"
	if c.Entities == "" {
		entities = "debug"
		b.WriteString("  debug:\n    verbosity: basic\n")
	} else {
		fileExporter(&b, entities, c.Entities)
	}
	if c.Profiles != nil {
		fileExporter(&b, "file/profiles", c.Profiles.Path)
		if ct := c.Profiles.CPUTime; ct != nil {
			fileExporter(&b, "file/cputime_metrics", ct.Metrics)
			fileExporter(&b, "file/cputime_logs", ct.Logs)
		}
	}

	telemetry := "      level: none\n"
	if c.MetricsPort > 0 {
		telemetry = fmt.Sprintf("      readers:\n        - pull:\n            exporter:\n              prometheus:\n                host: 127.0.0.1\n                port: %d\n", c.MetricsPort)
	}
	fmt.Fprintf(&b, `service:
  extensions: [%s]
  telemetry:
    metrics:
%s  pipelines:
    logs:
      receivers: [process_ctx]
      exporters: [%s]
`, extensions, telemetry, entities)
	if c.Profiles != nil {
		exporters := "file/profiles"
		if c.Profiles.CPUTime != nil {
			exporters += ", cpu_time"
		}
		fmt.Fprintf(&b, "    profiles:\n      receivers: [otlp]\n      processors: [ctx_enrich]\n      exporters: [%s]\n", exporters)
		if c.Profiles.CPUTime != nil {
			b.WriteString("    metrics/cpu_time:\n      receivers: [cpu_time]\n      exporters: [file/cputime_metrics]\n" +
				"    logs/cpu_time:\n      receivers: [cpu_time]\n      exporters: [file/cputime_logs]\n")
		}
	}
	return b.String()
}

// settings of one component, four spaces in.
type settings []string

func (s *settings) add(set bool, format string, args ...any) {
	if set {
		*s = append(*s, "    "+fmt.Sprintf(format, args...)+"\n")
	}
}

// String: "{}" when nothing is set, so that the component is configured
// with its defaults.
func (s settings) String() string {
	if len(s) == 0 {
		return " {}\n"
	}
	return "\n" + strings.Join(s, "")
}

func fileExporter(b *strings.Builder, name, path string) {
	fmt.Fprintf(b, "  %s:\n    path: %s\n    format: json\n    flush_interval: 100ms\n", name, path)
}

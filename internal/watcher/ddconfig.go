// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"fmt"

	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
)

// Which processes are searched for a DD_OTEL_CTX buffer
// (dd_otel_ctx.processes).
const (
	// DDProcessesJava: executables named java, or processes that map
	// libjvm.so (older Datadog Java profilers are the only known writer).
	DDProcessesJava = "java"
	// DDProcessesAll: every process the include/exclude filters let in.
	DDProcessesAll = "all"
	// DDProcessesNone (default): no process; the source is off. The ring
	// buffer is legacy: Datadog's Java profiler publishes OTEP 4947 records now.
	DDProcessesNone = "none"
)

// DDOtelCtxConfig configures the Datadog Java profiler's "otel" context
// storage (ctxstorage=otel) as a thread-context source: a ring buffer of
// per-thread trace and span ids found in an anonymous mapping
// (DD_OTEL_CTX), read by both thread samplers.
type DDOtelCtxConfig struct {
	// Processes selects the processes searched for a buffer: java, all or
	// none (default: the legacy source is opt-in).
	Processes string `mapstructure:"processes"`
}

func defaultDDOtelCtxConfig() DDOtelCtxConfig {
	return DDOtelCtxConfig{Processes: DDProcessesNone}
}

func (c DDOtelCtxConfig) validate() []error {
	switch c.Processes {
	case DDProcessesJava, DDProcessesAll, DDProcessesNone:
		return nil
	}
	return []error{fmt.Errorf("dd_otel_ctx.processes must be %q, %q or %q, got %q",
		DDProcessesJava, DDProcessesAll, DDProcessesNone, c.Processes)}
}

// bufferSearches are the scanner's buffer searches (scan.Options.Buffers):
// the DD_OTEL_CTX search over the processes dd_otel_ctx.processes selects,
// or none. The scanner's buffer counters are then the DD search's alone
// (recordScan).
func (cfg *Config) bufferSearches() []scan.BufferSearch {
	mode := cfg.ddMode()
	if mode == ddscan.SearchNone {
		return nil
	}
	return []scan.BufferSearch{ddscan.New(mode)}
}

// ddMode is the DD_OTEL_CTX search's mode: none when thread contexts are
// not read at all (thread_sampler: off), as a buffer is only worth finding
// to read its slots.
func (cfg *Config) ddMode() ddscan.Mode {
	if cfg.ThreadSampler == ThreadSamplerOff {
		return ddscan.SearchNone
	}
	return cfg.DDOtelCtx.mode()
}

// mode is the DD_OTEL_CTX search's mode for these processes.
func (c DDOtelCtxConfig) mode() ddscan.Mode {
	switch c.Processes {
	case DDProcessesAll:
		return ddscan.SearchAll
	case DDProcessesJava:
		return ddscan.SearchJava
	}
	return ddscan.SearchNone
}

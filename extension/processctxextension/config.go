// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxextension

import "github.com/otelctx/otelctx/internal/watcher"

// Config is the process_ctx extension's configuration: what is watched
// (include, exclude, limits), how often (collection_interval,
// discovery_interval, recheck_interval), how long exited processes stay
// joinable (exited_retention), and how thread contexts are read
// (thread_sampler, thread_context, dd_otel_ctx). README.md lists the keys.
type Config = watcher.Config

// The parts of Config.
type (
	// MatchConfig selects processes by executable name or PID.
	MatchConfig = watcher.MatchConfig
	// LimitsConfig bounds what one publisher can cost.
	LimitsConfig = watcher.LimitsConfig
	// ThreadContextConfig holds the thread samplers' parameters.
	ThreadContextConfig = watcher.ThreadContextConfig
	// DDOtelCtxConfig configures the Datadog DD_OTEL_CTX source.
	DDOtelCtxConfig = watcher.DDOtelCtxConfig
)

// Thread samplers (thread_sampler); README.md says what each does.
const (
	ThreadSamplerAuto   = watcher.ThreadSamplerAuto
	ThreadSamplerFollow = watcher.ThreadSamplerFollow
	ThreadSamplerEBPF   = watcher.ThreadSamplerEBPF
	ThreadSamplerPtrace = watcher.ThreadSamplerPtrace
	ThreadSamplerOff    = watcher.ThreadSamplerOff
)

// Processes searched for a DD_OTEL_CTX buffer (dd_otel_ctx.processes).
const (
	DDProcessesJava = watcher.DDProcessesJava
	DDProcessesAll  = watcher.DDProcessesAll
	DDProcessesNone = watcher.DDProcessesNone
)

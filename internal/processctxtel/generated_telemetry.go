// SPDX-License-Identifier: Apache-2.0

// The processctx extension's TelemetryBuilder, written by hand in the
// shape mdatagen generates from extension/processctxextension/metadata.yaml
// (mdatagen is not available to this build: docs/building.md). It lives
// here, not in the extension's internal/metadata (which aliases it), so
// that the extension hands this builder itself to the watcher and the
// thread sources. Keep it in step with metadata.yaml; the extension's
// metadata_test.go checks that the two agree.

package processctxtel

import (
	"errors"
	"sync"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"go.opentelemetry.io/collector/component"
)

func Meter(settings component.TelemetrySettings) metric.Meter {
	return settings.MeterProvider.Meter("github.com/otelctx/otelctx/extension/processctxextension")
}

func Tracer(settings component.TelemetrySettings) trace.Tracer {
	return settings.TracerProvider.Tracer("github.com/otelctx/otelctx/extension/processctxextension")
}

// TelemetryBuilder provides an interface for components to report telemetry
// as defined in metadata and user config.
type TelemetryBuilder struct {
	meter                               metric.Meter
	mu                                  sync.Mutex
	registrations                       []metric.Registration
	ProcessctxCatalogEvictions          metric.Int64Counter
	ProcessctxCatalogLimit              metric.Int64Gauge
	ProcessctxCatalogThreadsRefused     metric.Int64Counter
	ProcessctxCatalogUsed               metric.Int64Gauge
	ProcessctxConcurrentUpdateRetries   metric.Int64Counter
	ProcessctxEnvironmentInvalid        metric.Int64Counter
	ProcessctxEnvironmentReads          metric.Int64Counter
	ProcessctxContexts                  metric.Int64Gauge
	ProcessctxDdBuffers                 metric.Int64Gauge
	ProcessctxDdBuffersLost             metric.Int64Counter
	ProcessctxDdHeadersRefused          metric.Int64Counter
	ProcessctxDdSearches                metric.Int64Counter
	ProcessctxDdSlotsRefused            metric.Int64Counter
	ProcessctxInvalidUtf8               metric.Int64Counter
	ProcessctxKeyMapRefreshes           metric.Int64Counter
	ProcessctxLimitsExceeded            metric.Int64Counter
	ProcessctxPolls                     metric.Int64Counter
	ProcessctxPrctlEventsDropped        metric.Int64Counter
	ProcessctxPrctlEventsLimited        metric.Int64Counter
	ProcessctxPrctlRescans              metric.Int64Counter
	ProcessctxProcessMemory             metric.Int64Gauge
	ProcessctxProcessMemoryLimit        metric.Int64Gauge
	ProcessctxProcessesQuarantined      metric.Int64Gauge
	ProcessctxProcessesScanned          metric.Int64Counter
	ProcessctxReadTimeouts              metric.Int64Counter
	ProcessctxReadsFailed               metric.Int64Counter
	ProcessctxReadsHung                 metric.Int64Gauge
	ProcessctxScanDuration              metric.Float64Histogram
	ProcessctxStalled                   metric.Int64Gauge
	ProcessctxThreadContextSource       metric.Int64Gauge
	ProcessctxThreadReadFailures        metric.Int64Counter
	ProcessctxThreadSamples             metric.Int64Counter
	ProcessctxThreadSamplesDropped      metric.Int64Counter
	ProcessctxThreadSamplesFollowed     metric.Int64Counter
	ProcessctxThreadSamplesFollowedRate metric.Float64Gauge
	ProcessctxThreadSnapshots           metric.Int64Counter
	ProcessctxThreadStopDuration        metric.Float64Histogram
	ProcessctxThreadsAlreadyTraced      metric.Int64Counter
	ProcessctxThreadsRead               metric.Int64Counter
	ProcessctxTLSResolutions            metric.Int64Counter
}

// TelemetryBuilderOption applies changes to default builder.
type TelemetryBuilderOption interface {
	apply(*TelemetryBuilder)
}

type telemetryBuilderOptionFunc func(mb *TelemetryBuilder)

func (tbof telemetryBuilderOptionFunc) apply(mb *TelemetryBuilder) {
	tbof(mb)
}

// Shutdown unregister all registered callbacks for async instruments.
func (builder *TelemetryBuilder) Shutdown() {
	builder.mu.Lock()
	defer builder.mu.Unlock()
	for _, reg := range builder.registrations {
		reg.Unregister()
	}
}

// NewTelemetryBuilder provides a struct with methods to update all internal telemetry
// for a component
func NewTelemetryBuilder(settings component.TelemetrySettings, options ...TelemetryBuilderOption) (*TelemetryBuilder, error) {
	builder := TelemetryBuilder{}
	for _, op := range options {
		op.apply(&builder)
	}
	builder.meter = Meter(settings)
	var err, errs error
	builder.ProcessctxCatalogEvictions, err = builder.meter.Int64Counter(
		"otelcol_processctx_catalog_evictions",
		metric.WithDescription("What the catalog's bounds took to make room, by kind: threads (with their runs), runs, exited processes retained, tracked publishers let go for another user's."),
		metric.WithUnit("{item}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxCatalogLimit, err = builder.meter.Int64Gauge(
		"otelcol_processctx_catalog_limit",
		metric.WithDescription("The catalog's bound of each kind (limits.max_processes, max_retained_processes, max_threads, max_runs)."),
		metric.WithUnit("{item}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxCatalogThreadsRefused, err = builder.meter.Int64Counter(
		"otelcol_processctx_catalog_threads_refused",
		metric.WithDescription("New threads the catalog made no room for (every thread of the process was observed as recently)."),
		metric.WithUnit("{thread}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxCatalogUsed, err = builder.meter.Int64Gauge(
		"otelcol_processctx_catalog_used",
		metric.WithDescription("What the catalog holds, by kind: live processes, exited processes retained, threads with a history, runs of those histories."),
		metric.WithUnit("{item}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxEnvironmentInvalid, err = builder.meter.Int64Counter(
		"otelcol_processctx_environment_invalid",
		metric.WithDescription("Environment variables dropped (malformed or undecodable, over 32 KiB, over 128 keys)."),
		metric.WithUnit("{variable}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxEnvironmentReads, err = builder.meter.Int64Counter(
		"otelcol_processctx_environment_reads",
		metric.WithDescription("Environments read for processes' resources (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), by outcome: named (a resource), unnamed (neither variable usable), timeout (abandoned at the deadline), refused (too many reads blocked), failed (the process left or changed during the read)."),
		metric.WithUnit("{read}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxConcurrentUpdateRetries, err = builder.meter.Int64Counter(
		"otelcol_processctx_concurrent_update_retries",
		metric.WithDescription("Read-protocol restarts because the publisher was updating."),
		metric.WithUnit("{retry}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxProcessMemory, err = builder.meter.Int64Gauge(
		"otelcol_processctx_process_memory",
		metric.WithDescription("What is held per process against limits.max_process_memory, by part: tracked contexts, retained exits, the environment cache, TLS resolutions in flight."),
		metric.WithUnit("By"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxProcessMemoryLimit, err = builder.meter.Int64Gauge(
		"otelcol_processctx_process_memory_limit",
		metric.WithDescription("Each part's bound of limits.max_process_memory (contexts 1/2, retained exits and the environment cache 3/16 each, TLS resolutions in flight 1/8)."),
		metric.WithUnit("By"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxContexts, err = builder.meter.Int64Gauge(
		"otelcol_processctx_contexts",
		metric.WithDescription("Process contexts currently tracked."),
		metric.WithUnit("{process}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxDdBuffers, err = builder.meter.Int64Gauge(
		"otelcol_processctx_dd_buffers",
		metric.WithDescription("DD_OTEL_CTX buffers currently tracked."),
		metric.WithUnit("{buffer}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxDdBuffersLost, err = builder.meter.Int64Counter(
		"otelcol_processctx_dd_buffers_lost",
		metric.WithDescription("Tracked DD_OTEL_CTX buffers whose header stopped validating."),
		metric.WithUnit("{buffer}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxDdHeadersRefused, err = builder.meter.Int64Counter(
		"otelcol_processctx_dd_headers_refused",
		metric.WithDescription("DD_OTEL_CTX buffer headers refused (the magic or name, with a bad version, slot size or capacity)."),
		metric.WithUnit("{header}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxDdSearches, err = builder.meter.Int64Counter(
		"otelcol_processctx_dd_searches",
		metric.WithDescription("Searches of a process for a DD_OTEL_CTX buffer (dd_otel_ctx.processes), by result (found, not_found)."),
		metric.WithUnit("{search}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxDdSlotsRefused, err = builder.meter.Int64Counter(
		"otelcol_processctx_dd_slots_refused",
		metric.WithDescription("DD_OTEL_CTX slots read and not attributed to their thread, by reason (busy, torn, collision, stale, header, unlisted)."),
		metric.WithUnit("{slot}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxInvalidUtf8, err = builder.meter.Int64Counter(
		"otelcol_processctx_invalid_utf8",
		metric.WithDescription("Strings read from publishers (process-context keys and values, thread-record attribute values) whose invalid UTF-8 was replaced by U+FFFD, by source."),
		metric.WithUnit("{string}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxKeyMapRefreshes, err = builder.meter.Int64Counter(
		"otelcol_processctx_key_map_refreshes",
		metric.WithDescription("Re-reads of a process's thread attribute key map for a record with an unknown key index, by result (updated, unchanged, failed)."),
		metric.WithUnit("{refresh}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxLimitsExceeded, err = builder.meter.Int64Counter(
		"otelcol_processctx_limits_exceeded",
		metric.WithDescription("Contexts decoded with attributes dropped or values truncated by the limits."),
		metric.WithUnit("{context}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxPolls, err = builder.meter.Int64Counter(
		"otelcol_processctx_polls",
		metric.WithDescription("Steady-state polls of tracked processes (one 8-byte read each)."),
		metric.WithUnit("{poll}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxPrctlEventsDropped, err = builder.meter.Int64Counter(
		"otelcol_processctx_prctl_events_dropped",
		metric.WithDescription("prctl events (a mapping named OTEL_CTX or DD_OTEL_CTX) lost in the kernel because their ring buffer was full; the process is found at the next discovery round."),
		metric.WithUnit("{event}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxPrctlEventsLimited, err = builder.meter.Int64Counter(
		"otelcol_processctx_prctl_events_limited",
		metric.WithDescription("prctl events (a mapping named OTEL_CTX or DD_OTEL_CTX) not sent by the kernel because their process had sent two within min_rescan_interval (it is polled at that interval's end; a last event suppressed is caught by the next discovery round)."),
		metric.WithUnit("{event}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxPrctlRescans, err = builder.meter.Int64Counter(
		"otelcol_processctx_prctl_rescans",
		metric.WithDescription("Processes rescanned at once because they named a mapping with prctl (a context publication)."),
		metric.WithUnit("{process}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxProcessesScanned, err = builder.meter.Int64Counter(
		"otelcol_processctx_processes_scanned",
		metric.WithDescription("Processes whose /proc/PID/maps was examined for a process context."),
		metric.WithUnit("{process}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxReadsFailed, err = builder.meter.Int64Counter(
		"otelcol_processctx_reads_failed",
		metric.WithDescription("Failed process-context reads, by reason."),
		metric.WithUnit("{read}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxScanDuration, err = builder.meter.Float64Histogram(
		"otelcol_processctx_scan_duration",
		metric.WithDescription("Duration of one round (discovery or poll)."),
		metric.WithUnit("s"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxStalled, err = builder.meter.Int64Gauge(
		"otelcol_processctx_stalled",
		metric.WithDescription("1 while a stage has been busy for longer than stall_timeout (the extension then reports a recoverable error to the collector: health_check answers 500), else 0, by stage: poll_round, thread_reader, sample_reader, reads."),
		metric.WithUnit("1"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxReadTimeouts, err = builder.meter.Int64Counter(
		"otelcol_processctx_read_timeouts",
		metric.WithDescription("Reads of another process abandoned after read_timeout: of its memory (a page waiting on a FUSE server or a userfaultfd handler), or of its /proc files that take its mmap lock (maps, pagemap, map_files: the process holds the lock, e.g. a fault of its own on a FUSE page); the process is then quarantined."),
		metric.WithUnit("{read}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxReadsHung, err = builder.meter.Int64Gauge(
		"otelcol_processctx_reads_hung",
		metric.WithDescription("Reads abandoned after read_timeout and still blocked in the kernel now: a read of memory holds a thread of the reader helper process (otelctx-reader), never one of the collector's; a read of a /proc file that takes the mmap lock holds a collector thread in a killable wait; at most 1 per process, 4 per user and 32 in all for each of the two kinds (past that no process is read)."),
		metric.WithUnit("{read}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxProcessesQuarantined, err = builder.meter.Int64Gauge(
		"otelcol_processctx_processes_quarantined",
		metric.WithDescription("Processes not read now because a read of theirs hung: while it is blocked, and for a backoff after (10 s, doubling to 10 min with each timeout)."),
		metric.WithUnit("{process}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxThreadContextSource, err = builder.meter.Int64Gauge(
		"otelcol_processctx_thread_context_source",
		metric.WithDescription("Where thread contexts are read now (1) and not (0), by source: fentry or hrtimer (at a followed profiler's samples, through that method), own_ticks, ptrace, off."),
		metric.WithUnit("1"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxThreadReadFailures, err = builder.meter.Int64Counter(
		"otelcol_processctx_thread_read_failures",
		metric.WithDescription("Threads (or processes) whose thread context could not be read, by reason."),
		metric.WithUnit("{thread}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxThreadSamples, err = builder.meter.Int64Counter(
		"otelcol_processctx_thread_samples",
		metric.WithDescription("Thread-context samples received from the eBPF sampler (followed profiler samples, own ticks and, with off_cpu, switches)."),
		metric.WithUnit("{sample}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxThreadSamplesDropped, err = builder.meter.Int64Counter(
		"otelcol_processctx_thread_samples_dropped",
		metric.WithDescription("Thread-context samples lost in the kernel because the ring buffer was full."),
		metric.WithUnit("{sample}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxThreadSamplesFollowed, err = builder.meter.Int64Counter(
		"otelcol_processctx_thread_samples_followed",
		metric.WithDescription("Thread-context samples taken at a followed profiler's samples (of thread_samples)."),
		metric.WithUnit("{sample}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxThreadSamplesFollowedRate, err = builder.meter.Float64Gauge(
		"otelcol_processctx_thread_samples_followed_rate",
		metric.WithDescription("Thread-context samples taken at a followed profiler's samples per second, since the previous reading of the kernel counters (every collection_interval, and at most every second)."),
		metric.WithUnit("{sample}/s"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxThreadSnapshots, err = builder.meter.Int64Counter(
		"otelcol_processctx_thread_snapshots",
		metric.WithDescription("Thread-context snapshots of one process (every thread stopped in turn)."),
		metric.WithUnit("{snapshot}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxThreadStopDuration, err = builder.meter.Float64Histogram(
		"otelcol_processctx_thread_stop_duration",
		metric.WithDescription("How long one thread was kept stopped (PTRACE_INTERRUPT to PTRACE_DETACH)."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries([]float64{1e-06, 5e-06, 1e-05, 2.5e-05, 5e-05, 0.0001, 0.00025, 0.0005, 0.001, 0.005, 0.01, 0.1}...),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxThreadsAlreadyTraced, err = builder.meter.Int64Counter(
		"otelcol_processctx_threads_already_traced",
		metric.WithDescription("Threads skipped because another tracer (a debugger, a profiler) holds them."),
		metric.WithUnit("{thread}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxThreadsRead, err = builder.meter.Int64Counter(
		"otelcol_processctx_threads_read",
		metric.WithDescription("Threads whose thread-context record was read."),
		metric.WithUnit("{thread}"),
	)
	errs = errors.Join(errs, err)
	builder.ProcessctxTLSResolutions, err = builder.meter.Int64Counter(
		"otelcol_processctx_tls_resolutions",
		metric.WithDescription("Resolutions of otel_thread_ctx_v1 in a process, by the symbol table it was found in."),
		metric.WithUnit("{resolution}"),
	)
	errs = errors.Join(errs, err)
	return &builder, errs
}

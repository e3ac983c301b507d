// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxextension

import (
	"github.com/otelctx/otelctx/extension/processctxextension/internal/metadata"
	"github.com/otelctx/otelctx/internal/watcher"
)

// watcherInstruments hands the watcher the instruments of the extension's
// telemetry builder: the builder registers each once, the watcher records
// them.
func watcherInstruments(tb *metadata.TelemetryBuilder) *watcher.Instruments {
	return &watcher.Instruments{
		ProcessctxCatalogEvictions:          tb.ProcessctxCatalogEvictions,
		ProcessctxCatalogLimit:              tb.ProcessctxCatalogLimit,
		ProcessctxCatalogThreadsRefused:     tb.ProcessctxCatalogThreadsRefused,
		ProcessctxCatalogUsed:               tb.ProcessctxCatalogUsed,
		ProcessctxConcurrentUpdateRetries:   tb.ProcessctxConcurrentUpdateRetries,
		ProcessctxContexts:                  tb.ProcessctxContexts,
		ProcessctxDdBuffers:                 tb.ProcessctxDdBuffers,
		ProcessctxDdBuffersLost:             tb.ProcessctxDdBuffersLost,
		ProcessctxDdHeadersRefused:          tb.ProcessctxDdHeadersRefused,
		ProcessctxDdSearches:                tb.ProcessctxDdSearches,
		ProcessctxDdSlotsRefused:            tb.ProcessctxDdSlotsRefused,
		ProcessctxInvalidUtf8:               tb.ProcessctxInvalidUtf8,
		ProcessctxKeyMapRefreshes:           tb.ProcessctxKeyMapRefreshes,
		ProcessctxLimitsExceeded:            tb.ProcessctxLimitsExceeded,
		ProcessctxPolls:                     tb.ProcessctxPolls,
		ProcessctxPrctlEventsDropped:        tb.ProcessctxPrctlEventsDropped,
		ProcessctxPrctlEventsLimited:        tb.ProcessctxPrctlEventsLimited,
		ProcessctxPrctlRescans:              tb.ProcessctxPrctlRescans,
		ProcessctxProcessesQuarantined:      tb.ProcessctxProcessesQuarantined,
		ProcessctxProcessesScanned:          tb.ProcessctxProcessesScanned,
		ProcessctxReadTimeouts:              tb.ProcessctxReadTimeouts,
		ProcessctxReadsFailed:               tb.ProcessctxReadsFailed,
		ProcessctxReadsHung:                 tb.ProcessctxReadsHung,
		ProcessctxScanDuration:              tb.ProcessctxScanDuration,
		ProcessctxStalled:                   tb.ProcessctxStalled,
		ProcessctxThreadContextSource:       tb.ProcessctxThreadContextSource,
		ProcessctxThreadReadFailures:        tb.ProcessctxThreadReadFailures,
		ProcessctxThreadSamples:             tb.ProcessctxThreadSamples,
		ProcessctxThreadSamplesDropped:      tb.ProcessctxThreadSamplesDropped,
		ProcessctxThreadSamplesFollowed:     tb.ProcessctxThreadSamplesFollowed,
		ProcessctxThreadSamplesFollowedRate: tb.ProcessctxThreadSamplesFollowedRate,
		ProcessctxThreadSnapshots:           tb.ProcessctxThreadSnapshots,
		ProcessctxThreadStopDuration:        tb.ProcessctxThreadStopDuration,
		ProcessctxThreadsAlreadyTraced:      tb.ProcessctxThreadsAlreadyTraced,
		ProcessctxThreadsRead:               tb.ProcessctxThreadsRead,
		ProcessctxTLSResolutions:            tb.ProcessctxTLSResolutions,
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan

import (
	"errors"
	"os"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/lockread"
	"github.com/otelctx/otelctx/internal/proc/remote"
	"github.com/otelctx/otelctx/internal/proc/safemem"
)

// Reason classifies a failed read, for the receiver's
// reads-failed-by-reason counter.
type Reason uint8

// Failure reasons. The String form is the telemetry attribute value.
const (
	ReasonPermission Reason = iota
	ReasonProcessGone
	ReasonBadAddress
	ReasonInvalidHeader
	ReasonPayloadSize
	ReasonConcurrentUpdate
	ReasonMalformedPayload
	ReasonProcessLimit
	ReasonMaps
	ReasonOther
	// ReasonFileBacked: the payload is not in anonymous memory (package
	// safemem): reading it could block on a file system.
	ReasonFileBacked
	// ReasonBudget: the decoded context would cost more than its budget
	// (processctx.Limits.MaxDecodedSize).
	ReasonBudget
	// ReasonStalled: the read did not return within the read timeout, or
	// the process is quarantined after one that did not (package remote;
	// package lockread for its maps, pagemap and map_files).
	ReasonStalled
	// ReasonUserShare: the publisher's user (real UID) tracks its share of
	// the tracked processes already (ErrUserShare).
	ReasonUserShare
	// ReasonRoundBudget: the process cost a poll round more than its share
	// of the round's budget (ErrRoundBudget); it is not polled for a while.
	ReasonRoundBudget
	// ReasonMemoryShare: the tracked contexts cost MaxContextMemory and
	// no user holds more than the publisher's (ErrMemoryShare).
	ReasonMemoryShare
	numReasons
)

var reasonNames = [numReasons]string{
	"permission", "process_gone", "bad_address", "invalid_header", "payload_size",
	"concurrent_update", "malformed_payload", "process_limit", "maps", "other",
	"file_backed", "over_budget", "stalled", "user_share", "round_budget",
	"memory_share",
}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Reasons lists every reason, in order.
func Reasons() []Reason {
	out := make([]Reason, numReasons)
	for i := range out {
		out[i] = Reason(i)
	}
	return out
}

// ReasonOf maps an error from the readers to its Reason.
func ReasonOf(err error) Reason {
	switch {
	case errors.Is(err, remote.ErrPermission), errors.Is(err, os.ErrPermission):
		return ReasonPermission
	case errors.Is(err, remote.ErrProcessGone):
		return ReasonProcessGone
	case errors.Is(err, safemem.ErrFileBacked):
		return ReasonFileBacked
	case errors.Is(err, remote.ErrTimeout), errors.Is(err, remote.ErrQuarantined), errors.Is(err, remote.ErrHelper),
		lockread.Stalled(err):
		return ReasonStalled
	case errors.Is(err, remote.ErrBadAddress), errors.Is(err, remote.ErrShortRead):
		return ReasonBadAddress
	case errors.Is(err, processctx.ErrInvalidContext):
		return ReasonInvalidHeader
	case errors.Is(err, processctx.ErrPayloadSize):
		return ReasonPayloadSize
	case errors.Is(err, processctx.ErrConcurrentUpdate):
		return ReasonConcurrentUpdate
	case errors.Is(err, processctx.ErrBudget):
		return ReasonBudget
	case errors.Is(err, processctx.ErrMalformedPayload):
		return ReasonMalformedPayload
	case errors.Is(err, ErrProcessLimit):
		return ReasonProcessLimit
	case errors.Is(err, ErrUserShare):
		return ReasonUserShare
	case errors.Is(err, ErrRoundBudget):
		return ReasonRoundBudget
	case errors.Is(err, ErrMemoryShare):
		return ReasonMemoryShare
	case errors.Is(err, errMaps):
		return ReasonMaps
	default:
		return ReasonOther
	}
}

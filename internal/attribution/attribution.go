// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package attribution turns what the readers bring back about a process's
// threads (the eBPF sampler's samples, ptrace snapshots of OTEP 4947
// records, reads of DD_OTEL_CTX slots) into observations of those threads:
// which record a thread showed at a moment, that it showed none, or that
// nothing can be said. It holds every rule of that judgement, so that the
// collector and the CLI attribute alike:
//
//   - an OTEP 4947 sample is parsed (valid != 1 is no context; a record too
//     short to parse is refused) and its attribute keys named through the
//     process's key map, refreshed once when a record uses an unknown index;
//   - a DD_OTEL_CTX slot is the sampled thread's only if no other thread
//     listed just before or just after the sample maps to it (TIDs of the
//     process's PID namespace, pidns.TIDs), and if it does not still hold
//     the value a previous owner left (ddotel.Owners);
//   - a thread read through both sources shows its OTEP 4947 record while
//     it has one; once withdrawn, its DD slot speaks;
//   - observations are made for one process identity (publisher.ProcessID), and
//     a snapshot is written only if the PID still belongs to it.
//
// Where the observations go (the catalog, a table) is the caller's choice.
package attribution

import (
	"time"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring/ddslots"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// Reasons an observation carries no record, besides the threadread ones
// (no context: ReasonNullPointer, ReasonNotAllocated, ReasonNotValid,
// ReasonEmptySlot; refused: ReasonCollision, ReasonStaleOwner).
const (
	// ReasonParse: a sampled OTEP 4947 record could not be parsed (shorter
	// than its header).
	ReasonParse = "parse error"
	// ReasonNotResident: the kernel could not read the DD slot's page.
	// Usually a slot nobody wrote, but also a page swapped out: it says
	// nothing of the thread's context.
	ReasonNotResident = ddslots.ReasonNotResident
	// ReasonUnlisted: the process's threads could not be listed after the
	// sample (the process is gone): nothing vouches for the slot's owner.
	ReasonUnlisted = ddslots.ReasonUnlisted
)

// Observation is what one capture (or snapshot) says of one thread.
type Observation struct {
	TID  int
	Time time.Time
	// Record is the thread's context; nil when it has none (Reason is a
	// no-context reason) or when it cannot be vouched for (Refused).
	Record *catalog.ThreadRecord
	// Exact: the source shown was read at a followed profiler's sample, on
	// the sampled thread (catalog.ObserveFor's exact).
	Exact bool
	// Source is the source that speaks for the thread: the Source of the
	// schema whose read it is (Config.Variable's, Config.Buffer's).
	Source string
	// Reason says why Record is nil ("" with a record); Err has details.
	Reason string
	Err    error
}

// Refused reports whether the observation says nothing of the thread's
// context: it must not be recorded, not even as "no record" (that would
// cut the thread's run); callers count it by Reason.
func (o Observation) Refused() bool {
	return o.Record == nil && !noContext(o.Reason)
}

// noContext reports whether reason says the thread has no context now. A
// slot still holding a previous owner's value is refused here (the thread
// may have written the same ids: a sample does not cut its run on that); a
// snapshot cuts it (threadread.NoContext, see FromSnapshot).
func noContext(reason string) bool {
	switch reason {
	case threadread.ReasonNullPointer, threadread.ReasonNotAllocated, threadread.ReasonNotValid, threadread.ReasonEmptySlot:
		return true
	}
	return false
}

// SPDX-License-Identifier: Apache-2.0

package enrich

// Reason says why a sample was left as it was.
type Reason uint8

const (
	reasonNoProcess     Reason = iota // its resource was not joined (no PID, or no such process in the catalog)
	reasonPIDReuse                    // its data predates or contradicts the cataloged process
	reasonNoThreadID                  // no thread.id attribute
	reasonNoTimestamp                 // no timestamp
	reasonUnknownThread               // nothing observed of the thread near the sample
	reasonNoSpan                      // the thread had no span then
	reasonStale                       // observed, but nothing vouches for the sample (not bracketed, no exact observation within match_window)
	reasonAmbiguous                   // exact observations of two records about as near, or timestamps over several records with values that cannot be split
	reasonSplitBudget                 // its process's copy of a split resource would have taken the message past twice its size
	reasonLookupBudget                // its PID would have cost a /proc look-up past the message's budget (catalog.DefaultEnvLookups)
	// NumReasons is the number of reasons.
	NumReasons
)

var reasonNames = [NumReasons]string{"no_process", "pid_reuse", "no_thread_id", "no_timestamp", "unknown_thread", "no_span", "stale", "ambiguous", "split_budget", "lookup_budget"}

// String is the reason as the processor's metrics label it.
func (r Reason) String() string { return reasonNames[r] }

// Counts are one message's outcomes, handed back whole so that the
// per-sample path does not touch the metrics SDK.
type Counts struct {
	// Enriched: samples that got their thread's record.
	Enriched int64
	// Unmatched: samples left as they were, by reason.
	Unmatched [NumReasons]int64
	// Joined: resources joined with their process; JoinedEnv, of those,
	// processes named by their environment alone.
	Joined, JoinedEnv int64
	// NoPID, NoProcess: resources not joined because they name no process,
	// or one the catalog does not hold.
	NoPID, NoProcess int64
	// LookupBudget: resources (or a split resource's processes) not joined
	// because their PID would have cost a /proc look-up past the message's
	// budget.
	LookupBudget int64
	// PIDReuse: joins refused because the data predates or contradicts the
	// cataloged process.
	PIDReuse int64
	// ResourcesSplit: ResourceProfiles split by the processes their samples
	// name.
	ResourcesSplit int64
	// SamplesSplit: samples split because their timestamps saw several
	// records.
	SamplesSplit int64
	// Invalid: samples passed on untouched because their indices or times
	// cannot be trusted, by reason.
	Invalid [NumInvalid]int64
}

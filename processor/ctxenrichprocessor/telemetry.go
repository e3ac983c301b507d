// SPDX-License-Identifier: Apache-2.0

package ctxenrichprocessor

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelctx/otelctx/processor/ctxenrichprocessor/internal/metadata"
)

// reason says why a sample was left as it was.
type reason uint8

const (
	reasonNoProcess     reason = iota // its resource was not joined (no PID, or no such process in the catalog)
	reasonPIDReuse                    // its data predates or contradicts the cataloged process
	reasonNoThreadID                  // no thread.id attribute
	reasonNoTimestamp                 // no timestamp
	reasonUnknownThread               // nothing observed of the thread near the sample
	reasonNoSpan                      // the thread had no span then
	reasonStale                       // observed, but nothing vouches for the sample (not bracketed, no exact observation within match_window)
	reasonAmbiguous                   // exact observations of two records about as near, or timestamps over several records with values that cannot be split
	reasonSplitBudget                 // its process's copy of a split resource would have taken the message past twice its size
	numReasons
)

var reasonNames = [numReasons]string{"no_process", "pid_reuse", "no_thread_id", "no_timestamp", "unknown_thread", "no_span", "stale", "ambiguous", "split_budget"}

func (r reason) String() string { return reasonNames[r] }

// signals are the values of resources_joined's signal attribute.
var signals = []string{"profiles", "logs", "metrics", "traces"}

// Reasons of resources_unmatched.
const (
	resourceNoPID     = "no_pid"
	resourceNoProcess = "no_process"
)

// counts are one batch's outcomes, recorded once per batch so that the
// per-sample path does not touch the metrics SDK.
type counts struct {
	enriched   int64
	unmatched  [numReasons]int64
	joined     int64
	joinedEnv  int64 // of joined: processes named by their environment alone
	noPID      int64
	noProcess  int64
	pidReuse   int64
	splitCount int64
	// samplesSplit: samples split because their timestamps saw several
	// records.
	samplesSplit int64
	// invalid: samples passed on untouched because their indices or times
	// cannot be trusted, by reason.
	invalid [numInvalid]int64
}

// telemetry records the processor's own metrics: the instruments of its
// telemetry builder (metadata.yaml lists them) and their attribute sets,
// built once.
type telemetry struct {
	*metadata.TelemetryBuilder
	invalidAttrs  [numInvalid]metric.AddOption
	reasonAttrs   [numReasons]metric.AddOption
	noPIDAttr     metric.AddOption
	noProcessAttr metric.AddOption
	// joinedAttrs: per signal, per source (sourcePublished, sourceEnvironment).
	joinedAttrs map[string][2]metric.AddOption
}

// Values of resources_joined's source attribute: where the resource came
// from.
const (
	sourcePublished   = "published"   // a process context the process publishes
	sourceEnvironment = "environment" // OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES, for a process that publishes none
)

func newTelemetry(set component.TelemetrySettings) (*telemetry, error) {
	tb, err := metadata.NewTelemetryBuilder(set)
	if err != nil {
		return nil, err
	}
	t := &telemetry{TelemetryBuilder: tb}
	for r := validSample + 1; r < numInvalid; r++ {
		t.invalidAttrs[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r.String())))
	}
	for r := range numReasons {
		t.reasonAttrs[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r.String())))
	}
	t.noPIDAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", resourceNoPID)))
	t.noProcessAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", resourceNoProcess)))
	t.joinedAttrs = map[string][2]metric.AddOption{}
	for _, s := range signals {
		t.joinedAttrs[s] = [2]metric.AddOption{
			metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", s), attribute.String("source", sourcePublished))),
			metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", s), attribute.String("source", sourceEnvironment))),
		}
	}
	return t, nil
}

func (t *telemetry) record(ctx context.Context, signal string, c *counts) {
	if c.enriched > 0 {
		t.CtxenrichSamplesEnriched.Add(ctx, c.enriched)
	}
	for r, n := range c.unmatched {
		if n > 0 {
			t.CtxenrichSamplesUnmatched.Add(ctx, n, t.reasonAttrs[r])
		}
	}
	for r, n := range c.invalid {
		if n > 0 {
			t.CtxenrichSamplesInvalid.Add(ctx, n, t.invalidAttrs[r])
		}
	}
	if n := c.joined - c.joinedEnv; n > 0 {
		t.CtxenrichResourcesJoined.Add(ctx, n, t.joinedAttrs[signal][0])
	}
	if c.joinedEnv > 0 {
		t.CtxenrichResourcesJoined.Add(ctx, c.joinedEnv, t.joinedAttrs[signal][1])
	}
	if c.noPID > 0 {
		t.CtxenrichResourcesUnmatched.Add(ctx, c.noPID, t.noPIDAttr)
	}
	if c.noProcess > 0 {
		t.CtxenrichResourcesUnmatched.Add(ctx, c.noProcess, t.noProcessAttr)
	}
	if c.pidReuse > 0 {
		t.CtxenrichPidReuseRefusals.Add(ctx, c.pidReuse)
	}
	if c.samplesSplit > 0 {
		t.CtxenrichSamplesSplit.Add(ctx, c.samplesSplit)
	}
	if c.splitCount > 0 {
		t.CtxenrichResourcesSplit.Add(ctx, c.splitCount)
	}
}

// SPDX-License-Identifier: Apache-2.0

package ctxenrichprocessor

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelctx/otelctx/internal/enrich"
	"github.com/otelctx/otelctx/processor/ctxenrichprocessor/internal/metadata"
)

// signals are the values of resources_joined's signal attribute.
var signals = []string{"profiles", "logs", "metrics", "traces"}

// Reasons of resources_unmatched.
const (
	resourceNoPID        = "no_pid"
	resourceNoProcess    = "no_process"
	resourceLookupBudget = "lookup_budget"
)

// telemetry records the processor's own metrics: the instruments of its
// telemetry builder (metadata.yaml lists them) and their attribute sets,
// built once.
type telemetry struct {
	*metadata.TelemetryBuilder
	invalidAttrs  [enrich.NumInvalid]metric.AddOption
	reasonAttrs   [enrich.NumReasons]metric.AddOption
	noPIDAttr     metric.AddOption
	noProcessAttr metric.AddOption
	budgetAttr    metric.AddOption
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
	for r := enrich.Invalid(1); r < enrich.NumInvalid; r++ { // 0 is a valid sample
		t.invalidAttrs[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r.String())))
	}
	for r := range enrich.NumReasons {
		t.reasonAttrs[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", r.String())))
	}
	t.noPIDAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", resourceNoPID)))
	t.noProcessAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", resourceNoProcess)))
	t.budgetAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", resourceLookupBudget)))
	t.joinedAttrs = map[string][2]metric.AddOption{}
	for _, s := range signals {
		t.joinedAttrs[s] = [2]metric.AddOption{
			metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", s), attribute.String("source", sourcePublished))),
			metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", s), attribute.String("source", sourceEnvironment))),
		}
	}
	// The sample counters exist from the start, at 0: an alert on "nothing
	// enriched" must not see an absent series (one until the first join).
	t.CtxenrichSamplesEnriched.Add(context.Background(), 0)
	for r := range enrich.NumReasons {
		t.CtxenrichSamplesUnmatched.Add(context.Background(), 0, t.reasonAttrs[r])
	}
	return t, nil
}

func (t *telemetry) record(ctx context.Context, signal string, c *enrich.Counts) {
	if c.Enriched > 0 {
		t.CtxenrichSamplesEnriched.Add(ctx, c.Enriched)
	}
	for r, n := range c.Unmatched {
		if n > 0 {
			t.CtxenrichSamplesUnmatched.Add(ctx, n, t.reasonAttrs[r])
		}
	}
	for r, n := range c.Invalid {
		if n > 0 {
			t.CtxenrichSamplesInvalid.Add(ctx, n, t.invalidAttrs[r])
		}
	}
	if n := c.Joined - c.JoinedEnv; n > 0 {
		t.CtxenrichResourcesJoined.Add(ctx, n, t.joinedAttrs[signal][0])
	}
	if c.JoinedEnv > 0 {
		t.CtxenrichResourcesJoined.Add(ctx, c.JoinedEnv, t.joinedAttrs[signal][1])
	}
	if c.NoPID > 0 {
		t.CtxenrichResourcesUnmatched.Add(ctx, c.NoPID, t.noPIDAttr)
	}
	if c.NoProcess > 0 {
		t.CtxenrichResourcesUnmatched.Add(ctx, c.NoProcess, t.noProcessAttr)
	}
	if c.LookupBudget > 0 {
		t.CtxenrichResourcesUnmatched.Add(ctx, c.LookupBudget, t.budgetAttr)
	}
	if c.PIDReuse > 0 {
		t.CtxenrichPidReuseRefusals.Add(ctx, c.PIDReuse)
	}
	if c.SamplesSplit > 0 {
		t.CtxenrichSamplesSplit.Add(ctx, c.SamplesSplit)
	}
	if c.ResourcesSplit > 0 {
		t.CtxenrichResourcesSplit.Add(ctx, c.ResourcesSplit)
	}
}

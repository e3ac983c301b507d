// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelctx/otelctx/connector/cputimeconnector/internal/metadata"
	"github.com/otelctx/otelctx/internal/cputime"
)

// Values of the span attribute of samples_aggregated.
const (
	spanLinked = "linked"
	spanNone   = "none"
)

// reasonNotCPU: a sample of a profile that does not measure CPU time.
const reasonNotCPU = "not_cpu"

// skipReasons are the reason values of samples_skipped.
func skipReasons() []string { return append([]string{reasonNotCPU}, cputime.InvalidNames()...) }

// telemetry records one output's metrics through its telemetry builder,
// with the attribute sets built once.
type telemetry struct {
	*metadata.TelemetryBuilder
	signal           metric.AddOption
	linked, unlinked metric.AddOption
	notCPU           metric.AddOption
	invalid          [8]metric.AddOption
}

func newTelemetry(set component.TelemetrySettings, sig signal) (*telemetry, error) {
	tb, err := metadata.NewTelemetryBuilder(set)
	if err != nil {
		return nil, err
	}
	s := attribute.String("signal", signalNames[sig])
	t := &telemetry{TelemetryBuilder: tb, signal: metric.WithAttributeSet(attribute.NewSet(s))}
	t.linked = metric.WithAttributeSet(attribute.NewSet(s, attribute.String("span", spanLinked)))
	t.unlinked = metric.WithAttributeSet(attribute.NewSet(s, attribute.String("span", spanNone)))
	t.notCPU = metric.WithAttributeSet(attribute.NewSet(s, attribute.String("reason", reasonNotCPU)))
	for i, name := range cputime.InvalidNames() {
		t.invalid[i+1] = metric.WithAttributeSet(attribute.NewSet(s, attribute.String("reason", name)))
	}
	return t, nil
}

func (t *telemetry) record(ctx context.Context, c *counts) {
	if c.linked > 0 {
		t.CputimeSamplesAggregated.Add(ctx, c.linked, t.linked)
	}
	if c.unlinked > 0 {
		t.CputimeSamplesAggregated.Add(ctx, c.unlinked, t.unlinked)
	}
	if c.unknownService > 0 {
		t.CputimeSamplesUnknownService.Add(ctx, c.unknownService, t.signal)
	}
	if c.notCPU > 0 {
		t.CputimeSamplesSkipped.Add(ctx, c.notCPU, t.notCPU)
	}
	for r, n := range c.invalid {
		if n > 0 {
			t.CputimeSamplesSkipped.Add(ctx, n, t.invalid[r])
		}
	}
	if c.overflow > 0 {
		t.CputimeSamplesOverflow.Add(ctx, c.overflow)
	}
	if c.folded > 0 {
		t.CputimeSpanRecordsFolded.Add(ctx, c.folded)
	}
}

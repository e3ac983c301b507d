// Package metadata holds what mdatagen would generate from metadata.yaml,
// written by hand (docs/building.md): keep the two in step.
package metadata

import "go.opentelemetry.io/collector/component"

var (
	// Type is the component type of the processor.
	Type = component.MustNewType("ctxenrich")
	// ScopeName is the instrumentation scope of its telemetry.
	ScopeName = "github.com/otelctx/otelctx/processor/ctxenrichprocessor"
)

// Stability of each signal.
const (
	ProfilesStability = component.StabilityLevelDevelopment
	LogsStability     = component.StabilityLevelDevelopment
	MetricsStability  = component.StabilityLevelDevelopment
	TracesStability   = component.StabilityLevelDevelopment
)

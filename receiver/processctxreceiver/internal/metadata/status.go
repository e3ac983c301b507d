// Package metadata holds what mdatagen would generate from metadata.yaml,
// written by hand (docs/building.md): keep the two in step.
package metadata

import "go.opentelemetry.io/collector/component"

var (
	// Type is the component type of the receiver.
	Type = component.MustNewType("processctx")
	// ScopeName is the instrumentation scope of its telemetry and events.
	ScopeName = "github.com/otelctx/otelctx/receiver/processctxreceiver"
)

// LogsStability is the stability of the logs signal.
const LogsStability = component.StabilityLevelDevelopment

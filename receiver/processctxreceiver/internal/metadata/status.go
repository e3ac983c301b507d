// Package metadata holds what mdatagen would generate from metadata.yaml
// (mdatagen is not reachable through this machine's module proxy; keep the
// two in step by hand).
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

// Package metadata holds what mdatagen would generate from metadata.yaml,
// written by hand (docs/building.md): keep the two in step.
package metadata

import "go.opentelemetry.io/collector/component"

var (
	// Type is the component type of the extension.
	Type = component.MustNewType("processctx")
	// ScopeName is the instrumentation scope of its telemetry.
	ScopeName = "github.com/otelctx/otelctx/extension/processctxextension"
)

// ExtensionStability is the stability of the extension.
const ExtensionStability = component.StabilityLevelDevelopment

// SPDX-License-Identifier: Apache-2.0

// Written by hand in the shape mdatagen generates from metadata.yaml
// (mdatagen is not available to this build: docs/building.md). Keep it in
// step with metadata.yaml until generation replaces it.

// Package metadata contains the telemetry and
// build information for the processor/ctx_enrich component.
package metadata

import (
	"go.opentelemetry.io/collector/component"
)

var (
	Type           = component.MustNewType("ctx_enrich")
	DeprecatedType = component.MustNewType("ctxenrich")
	ScopeName      = "github.com/otelctx/otelctx/processor/ctxenrichprocessor"
)

const (
	ProfilesStability = component.StabilityLevelDevelopment
	LogsStability     = component.StabilityLevelDevelopment
	MetricsStability  = component.StabilityLevelDevelopment
	TracesStability   = component.StabilityLevelDevelopment
)

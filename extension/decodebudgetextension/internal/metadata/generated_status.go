// SPDX-License-Identifier: Apache-2.0

// Written by hand in the shape mdatagen generates from metadata.yaml
// (mdatagen is not available to this build: docs/building.md). Keep it in
// step with metadata.yaml until generation replaces it.

// Package metadata contains the telemetry and
// build information for the extension/decode_budget component.
package metadata

import (
	"go.opentelemetry.io/collector/component"
)

var (
	Type      = component.MustNewType("decode_budget")
	ScopeName = "github.com/otelctx/otelctx/extension/decodebudgetextension"
)

const (
	ExtensionStability = component.StabilityLevelDevelopment
)

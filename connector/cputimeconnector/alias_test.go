// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"testing"

	"github.com/otelctx/otelctx/connector/cputimeconnector/internal/metadata"
	"github.com/otelctx/otelctx/internal/testutil/aliastest"
)

// TestDeprecatedTypeAlias: the type is cpu_time, and cputime (the type before
// 0.4.0) is its deprecated alias (aliastest).
func TestDeprecatedTypeAlias(t *testing.T) {
	aliastest.Check(t, NewFactory(), metadata.Type, metadata.DeprecatedType, "cpu_time", "cputime")
}

// SPDX-License-Identifier: Apache-2.0

package processctxextension

import (
	"testing"

	"github.com/otelctx/otelctx/extension/processctxextension/internal/metadata"
	"github.com/otelctx/otelctx/internal/testutil/aliastest"
)

// TestDeprecatedTypeAlias: the type is process_ctx, and processctx (the type before
// 0.4.0) is its deprecated alias (aliastest).
func TestDeprecatedTypeAlias(t *testing.T) {
	aliastest.Check(t, NewFactory(), metadata.Type, metadata.DeprecatedType, "process_ctx", "processctx")
}

// SPDX-License-Identifier: Apache-2.0

package ctxenrichprocessor

import (
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/aliastest"
	"github.com/otelctx/otelctx/processor/ctxenrichprocessor/internal/metadata"
)

// TestDeprecatedTypeAlias: the type is ctx_enrich, and ctxenrich (the type before
// 0.4.0) is its deprecated alias (aliastest).
func TestDeprecatedTypeAlias(t *testing.T) {
	aliastest.Check(t, NewFactory(), metadata.Type, metadata.DeprecatedType, "ctx_enrich", "ctxenrich")
}

// SPDX-License-Identifier: Apache-2.0

package processctxreceiver

import (
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/aliastest"
	"github.com/otelctx/otelctx/receiver/processctxreceiver/internal/metadata"
)

// TestDeprecatedTypeAlias: the type is process_ctx, and processctx (the type before
// 0.4.0) is its deprecated alias (aliastest).
func TestDeprecatedTypeAlias(t *testing.T) {
	aliastest.Check(t, NewFactory(), metadata.Type, metadata.DeprecatedType, "process_ctx", "processctx")
}

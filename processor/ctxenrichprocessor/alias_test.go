// SPDX-License-Identifier: Apache-2.0

package ctxenrichprocessor

import (
	"os"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"

	"github.com/otelctx/otelctx/processor/ctxenrichprocessor/internal/metadata"
)

// TestDeprecatedTypeAlias: the type is ctx_enrich, and ctxenrich (the type before
// 0.4.0) is its deprecated alias, registered with the factory (the
// collector accepts it and logs that it is deprecated) and written in
// metadata.yaml as mdatagen reads it (type, deprecated_type).
func TestDeprecatedTypeAlias(t *testing.T) {
	if metadata.Type.String() != "ctx_enrich" || metadata.DeprecatedType.String() != "ctxenrich" {
		t.Errorf("type %q, deprecated %q, want ctx_enrich, ctxenrich", metadata.Type, metadata.DeprecatedType)
	}
	f := NewFactory()
	if f.Type() != metadata.Type {
		t.Errorf("factory type %q, want %q", f.Type(), metadata.Type)
	}
	a, ok := f.(interface{ DeprecatedAlias() component.Type })
	if !ok || a.DeprecatedAlias() != metadata.DeprecatedType {
		t.Errorf("factory %T registers no deprecated alias %q", f, metadata.DeprecatedType)
	}
	b, err := os.ReadFile("metadata.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\ntype: ctx_enrich\n", "\ndeprecated_type: ctxenrich\n"} {
		if !strings.Contains("\n"+string(b), want) {
			t.Errorf("metadata.yaml has no %q", strings.TrimSpace(want))
		}
	}
}

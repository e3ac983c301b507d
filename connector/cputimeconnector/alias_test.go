// SPDX-License-Identifier: Apache-2.0

package cputimeconnector

import (
	"os"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"

	"github.com/otelctx/otelctx/connector/cputimeconnector/internal/metadata"
)

// TestDeprecatedTypeAlias: the type is cpu_time, and cputime (the type before
// 0.4.0) is its deprecated alias, registered with the factory (the
// collector accepts it and logs that it is deprecated) and written in
// metadata.yaml as mdatagen reads it (type, deprecated_type).
func TestDeprecatedTypeAlias(t *testing.T) {
	if metadata.Type.String() != "cpu_time" || metadata.DeprecatedType.String() != "cputime" {
		t.Errorf("type %q, deprecated %q, want cpu_time, cputime", metadata.Type, metadata.DeprecatedType)
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
	for _, want := range []string{"\ntype: cpu_time\n", "\ndeprecated_type: cputime\n"} {
		if !strings.Contains("\n"+string(b), want) {
			t.Errorf("metadata.yaml has no %q", strings.TrimSpace(want))
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

// Package aliastest checks a component's renamed type: the type, its
// deprecated alias registered with the factory (the collector accepts it
// and logs that it is deprecated), and both written in the component's
// metadata.yaml as mdatagen reads them (type, deprecated_type).
package aliastest

import (
	"os"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component"
)

// Check checks factory f of the component in the current directory, whose
// metadata package says typ and deprecated, against want and wantOld.
func Check(t *testing.T, f interface{ Type() component.Type }, typ, deprecated component.Type, want, wantOld string) {
	t.Helper()
	if typ.String() != want || deprecated.String() != wantOld {
		t.Errorf("type %q, deprecated %q, want %s, %s", typ, deprecated, want, wantOld)
	}
	if f.Type() != typ {
		t.Errorf("factory type %q, want %q", f.Type(), typ)
	}
	a, ok := f.(interface{ DeprecatedAlias() component.Type })
	if !ok || a.DeprecatedAlias() != deprecated {
		t.Errorf("factory %T registers no deprecated alias %q", f, deprecated)
	}
	b, err := os.ReadFile("metadata.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"\ntype: " + want + "\n", "\ndeprecated_type: " + wantOld + "\n"} {
		if !strings.Contains("\n"+string(b), line) {
			t.Errorf("metadata.yaml has no %q", strings.TrimSpace(line))
		}
	}
}

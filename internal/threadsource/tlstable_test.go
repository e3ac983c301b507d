// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otelctx/otelctx/internal/testutil/telemetrytest"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// The readers' cache counts each resolution by the symbol table the
// variable came from: an exporting writer under dynsym, a plain -static
// one under symtab; a cached location is not counted again.
func TestTLSResolutionsByTable(t *testing.T) {
	testenv.RequireRoot(t)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	ttel := newTelemetry(testTelemetry(t, tel))
	cache := ttel.newCache()
	exported := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.Exe, Dialect: threadpub.TLSDESC})
	static := threadpub.Start(t, threadpub.Cell{Libc: threadpub.Musl, Where: threadpub.Exe, Dialect: threadpub.TLSDESC, Static: true, SymtabOnly: true})
	for range 2 {
		for _, p := range []*threadpub.Publisher{exported, static} {
			if _, err := cache.Location(p.PID); err != nil {
				t.Fatalf("pid %d: %v", p.PID, err)
			}
		}
	}
	const name = "otelcol_processctx_tls_resolutions"
	if d, s := telemetrytest.Sum(tel, name, "table", "dynsym"), telemetrytest.Sum(tel, name, "table", "symtab"); d != 1 || s != 1 {
		t.Fatalf("%s: dynsym %d, symtab %d; want 1 and 1", name, d, s)
	}
}

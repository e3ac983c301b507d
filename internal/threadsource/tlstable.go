// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"

	"github.com/otelctx/otelctx/internal/threads/threadread"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// newCache returns the readers' resolution cache, its resolutions counted
// by the symbol table otel_thread_ctx_v1 was found in (tls_resolutions:
// dynsym, or symtab for an executable that does not export it, outside
// OTEP 4947), so that such writers show in the Collector's own telemetry.
// The cache resolves once per process and mapping change, so the count is
// of resolutions, not of reads.
func (t *telemetry) newCache() *threadread.Cache {
	c := threadread.NewCache("")
	if t == nil {
		return c
	}
	resolve, tables := c.ResolveContext, t.tlsTables
	c.ResolveContext = func(ctx context.Context, procRoot string, pid int) (*tlsvar.Location, error) {
		loc, err := resolve(ctx, procRoot, pid)
		if err == nil {
			tables.Add(context.Background(), loc.SymbolTable, 1)
		}
		return loc, err
	}
	return c
}

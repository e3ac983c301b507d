// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelctx/otelctx/internal/threads/threadread"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// tlsTableCounter counts resolutions of otel_thread_ctx_v1 by the symbol
// table it was found in (attribute `table`: dynsym, or symtab for an
// executable that does not export it, outside OTEP 4947), so that such
// writers show in the Collector's own telemetry.
type tlsTableCounter struct {
	counter metric.Int64Counter
	mu      sync.Mutex
	attrs   map[string]metric.MeasurementOption
}

func newTLSTableCounter(in *Instruments) *tlsTableCounter {
	return &tlsTableCounter{counter: in.ProcessctxTLSResolutions, attrs: map[string]metric.MeasurementOption{}}
}

func (c *tlsTableCounter) add(table string) {
	// Resolutions run on the readers' goroutines (and may outlive their
	// timeout on another): the lazily filled cache needs the lock.
	c.mu.Lock()
	a, ok := c.attrs[table]
	if !ok {
		a = metric.WithAttributeSet(attribute.NewSet(attribute.String("table", table)))
		c.attrs[table] = a
	}
	c.mu.Unlock()
	c.counter.Add(context.Background(), 1, a)
}

// newCache returns the readers' resolution cache, its resolutions counted
// by symbol table. The cache resolves once per process and mapping change,
// so the count is of resolutions, not of reads.
func (t *threadTelemetry) newCache() *threadread.Cache {
	c := threadread.NewCache("")
	if t == nil || t.tlsTables == nil {
		return c
	}
	resolve, tables := c.ResolveContext, t.tlsTables
	c.ResolveContext = func(ctx context.Context, procRoot string, pid int) (*tlsvar.Location, error) {
		loc, err := resolve(ctx, procRoot, pid)
		if err == nil {
			tables.add(loc.SymbolTable)
		}
		return loc, err
	}
	return c
}

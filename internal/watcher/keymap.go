// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/proc/safemem"
	"github.com/otelctx/otelctx/internal/publisher"
)

// Results of a key-map refresh (key_map_refreshes).
const (
	keyMapUpdated   = "updated"   // the context now names more keys
	keyMapUnchanged = "unchanged" // read, no new keys: the index stays unnamed
	keyMapFailed    = "failed"    // the context could not be read (a debug log says why)
)

// keyMapTelemetry counts the re-reads of a process's attribute key map
// that a record with an unknown key index asks for.
type keyMapTelemetry struct {
	refreshes metric.Int64Counter
	attrs     map[string]metric.AddOption
}

func newKeyMapTelemetry(in *Instruments) *keyMapTelemetry {
	t := &keyMapTelemetry{refreshes: in.ProcessctxKeyMapRefreshes, attrs: map[string]metric.AddOption{}}
	for _, r := range []string{keyMapUpdated, keyMapUnchanged, keyMapFailed} {
		t.attrs[r] = metric.WithAttributeSet(attribute.NewSet(attribute.String("result", r)))
	}
	return t
}

// refresher re-reads p's key map where its context is mapped, through
// safemem (the publisher chose the address), and counts the outcome.
func (t *keyMapTelemetry) refresher(log *zap.Logger, p *publisher.Process, limits processctx.Limits) func() ([]string, error) {
	pid, addr, known := p.ID.PID, p.MappingAddr, len(p.Context.ThreadLocal.AttributeKeyMap)
	return func() ([]string, error) {
		c, _, err := processctx.Read(safemem.New("", pid), addr, limits)
		km := c.ThreadLocal.AttributeKeyMap
		result := keyMapUnchanged
		switch {
		case err != nil:
			result = keyMapFailed
			log.Debug("thread attribute key map not re-read", zap.Int("pid", pid), zap.Error(err))
		case len(km) > known:
			result = keyMapUpdated
		}
		t.refreshes.Add(context.Background(), 1, t.attrs[result])
		return km, err
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"

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

// keyMapRefresher re-reads p's key map (when a record uses a key index
// the context did not name) where its context is mapped, through
// safemem (the publisher chose the address), and counts the outcome.
func (t *telemetry) keyMapRefresher(log *zap.Logger, p *publisher.Process, limits processctx.Limits) func() ([]string, error) {
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
		t.keyMaps.Add(context.Background(), result, 1)
		return km, err
	}
}

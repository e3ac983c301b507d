// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"context"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/threadread"
)

// Results of a key-map refresh (key_map_refreshes).
const (
	keyMapUpdated   = "updated"   // the context now names more keys
	keyMapUnchanged = "unchanged" // read, no new keys: the index stays unnamed
	keyMapFailed    = "failed"    // the context could not be read (a debug log says why)
)

// keyMapRefresher is threadread's refresher of p's key map, its outcomes
// counted (key_map_refreshes) and a failure logged.
func (t *telemetry) keyMapRefresher(log *zap.Logger, p *publisher.Process, limits processctx.Limits) func() ([]string, error) {
	refresh, pid, known := threadread.KeyMapRefresher("", p, limits), p.ID.PID, len(p.Context.ThreadLocal.AttributeKeyMap)
	return func() ([]string, error) {
		km, err := refresh()
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

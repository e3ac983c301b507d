// SPDX-License-Identifier: Apache-2.0

//go:build linux

package watcher

import (
	"context"

	"github.com/otelctx/otelctx/internal/threadsource"
)

// benchSource is the thread source of BenchmarkWatcherPollRound: none.
func benchSource() threadsource.Source { return threadsource.None{} }

func benchRecordSource(ctx context.Context, w *Watcher) {
	w.tel.recordSource(ctx, threadsource.AtNowhere)
}

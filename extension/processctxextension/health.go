// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxextension

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/watcher"
)

// healthEvery is how often the stall check runs at most (and at least
// four times per stall_timeout).
const healthEvery = time.Second

// watchHealth reports the extension's status to host until ctx ends: a
// recoverable error while a stage has been busy for longer than bound
// (watcher.Stuck), OK again once none is. The health_check extension
// (component status mode) turns that into its HTTP answer.
func watchHealth(ctx context.Context, log *zap.Logger, host component.Host, w *watcher.Watcher, bound time.Duration, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(min(healthEvery, bound/4))
	defer t.Stop()
	unhealthy := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		stuck := w.RecordStalls(ctx, bound)
		switch {
		case len(stuck) > 0 && !unhealthy:
			unhealthy = true
			err := stuckError(stuck, bound)
			log.Error("reporting the extension unhealthy", zap.Error(err))
			componentstatus.ReportStatus(host, componentstatus.NewRecoverableErrorEvent(err))
		case len(stuck) == 0 && unhealthy:
			unhealthy = false
			log.Info("process_ctx moves again: reporting the extension healthy")
			componentstatus.ReportStatus(host, componentstatus.NewEvent(componentstatus.StatusOK))
		}
	}
}

func stuckError(stuck []watcher.Stuck, bound time.Duration) error {
	parts := make([]string, len(stuck))
	for i, s := range stuck {
		parts[i] = fmt.Sprintf("%s for %v", s.Stage, s.For.Round(time.Millisecond))
	}
	return fmt.Errorf("process_ctx stalled (stall_timeout %v): %s", bound, strings.Join(parts, ", "))
}

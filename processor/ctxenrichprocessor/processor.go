// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ctxenrichprocessor

import (
	"context"
	"fmt"
	"sync/atomic"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/catalog"
	"github.com/otelctx/otelctx/internal/enrich"
	"github.com/otelctx/otelctx/internal/watcher"
)

// enricher is one ctx_enrich processor instance (one per signal): the join
// (internal/enrich) over the extension's catalog, and its telemetry.
type enricher struct {
	policy enrich.Policy
	tel    *telemetry
	logger *zap.Logger
	ext    component.ID
	// cat is set by Start, from the extension (the collector starts
	// extensions before pipelines).
	cat atomic.Pointer[catalog.Catalog]
}

func newEnricher(set processor.Settings, cfg *Config) (*enricher, error) {
	tel, err := newTelemetry(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	return &enricher{policy: cfg.policy(), tel: tel, logger: set.Logger, ext: cfg.Extension}, nil
}

func (e *enricher) start(_ context.Context, host component.Host) error {
	w, err := watcher.FromHost(host, e.ext)
	if err != nil {
		return fmt.Errorf("ctx_enrich: %w", err)
	}
	e.cat.Store(w.Catalog())
	return nil
}

// record counts a message's outcomes; a message whose PIDs ran out of
// /proc look-ups (hostile, or a host starting processes faster than
// messages name them) is logged at debug level as well.
func (e *enricher) record(ctx context.Context, signal string, cnt *enrich.Counts) {
	e.tel.record(ctx, signal, cnt)
	if cnt.LookupBudget > 0 {
		e.logger.Debug("ctxenrich: PIDs past the message's /proc look-up budget left unjoined",
			zap.String("signal", signal), zap.Int64("resources", cnt.LookupBudget))
	}
}

func (e *enricher) shutdown(context.Context) error {
	e.tel.Shutdown()
	return nil
}

func (e *enricher) processProfiles(ctx context.Context, pd pprofile.Profiles) (pprofile.Profiles, error) {
	if c := e.cat.Load(); c != nil {
		cnt := enrich.Profiles(c, &e.policy, pd)
		e.record(ctx, "profiles", &cnt)
	}
	return pd, nil
}

func (e *enricher) processLogs(ctx context.Context, ld plog.Logs) (plog.Logs, error) {
	if c := e.cat.Load(); c != nil {
		cnt := enrich.Logs(c, &e.policy, ld)
		e.record(ctx, "logs", &cnt)
	}
	return ld, nil
}

func (e *enricher) processTraces(ctx context.Context, td ptrace.Traces) (ptrace.Traces, error) {
	if c := e.cat.Load(); c != nil {
		cnt := enrich.Traces(c, &e.policy, td)
		e.record(ctx, "traces", &cnt)
	}
	return td, nil
}

func (e *enricher) processMetrics(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	if c := e.cat.Load(); c != nil {
		cnt := enrich.Metrics(c, &e.policy, md)
		e.record(ctx, "metrics", &cnt)
	}
	return md, nil
}

// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package ctxenrichprocessor

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"

	"github.com/otelctx/otelctx/internal/linuxonly"
)

// enricher fails at Start; nothing reaches the process functions.
type enricher struct{ linuxonly.Component }

func newEnricher(processor.Settings, *Config) (*enricher, error) {
	return &enricher{linuxonly.Component{Name: "ctx_enrich processor"}}, nil
}

func (e *enricher) start(ctx context.Context, host component.Host) error { return e.Start(ctx, host) }

func (e *enricher) shutdown(ctx context.Context) error { return e.Shutdown(ctx) }

func (*enricher) processLogs(_ context.Context, ld plog.Logs) (plog.Logs, error) { return ld, nil }

func (*enricher) processMetrics(_ context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	return md, nil
}

func (*enricher) processTraces(_ context.Context, td ptrace.Traces) (ptrace.Traces, error) {
	return td, nil
}

func (*enricher) processProfiles(_ context.Context, pd pprofile.Profiles) (pprofile.Profiles, error) {
	return pd, nil
}

// SPDX-License-Identifier: Apache-2.0

package decodebudgetextension

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"

	"github.com/otelctx/otelctx/extension/decodebudgetextension/internal/metadata"
)

type decodeBudget struct {
	cfg       Config
	telemetry *metadata.TelemetryBuilder
	logger    *zap.Logger
	// One budget for every server that names the extension: the bound is
	// the process's.
	budget *budget
	mu     sync.Mutex
	codecs []*codec
}

// decodeBudget is an extensionmiddleware.GRPCServer (configgrpc asserts
// the method set; the module is not imported, to add no dependency).
var _ interface {
	GetGRPCServerOptions(context.Context) ([]grpc.ServerOption, error)
} = (*decodeBudget)(nil)

func (*decodeBudget) Start(context.Context, component.Host) error { return nil }

func (e *decodeBudget) Shutdown(context.Context) error {
	e.telemetry.Shutdown()
	return nil
}

// GetGRPCServerOptions: the server's codec (the "proto" codec registered
// now, pdata's own, behind the budget) and the interceptor that answers the
// requests it refused.
func (e *decodeBudget) GetGRPCServerOptions(context.Context) ([]grpc.ServerOption, error) {
	delegate := encoding.GetCodecV2("proto")
	if delegate == nil {
		return nil, errors.New("decode_budget: no proto codec registered")
	}
	c := &codec{delegate: delegate, budget: e.budget, maxElements: e.cfg.MaxElements,
		telemetry: e.telemetry, logger: e.logger}
	e.mu.Lock()
	e.codecs = append(e.codecs, c)
	e.mu.Unlock()
	return []grpc.ServerOption{grpc.ForceServerCodecV2(c), grpc.ChainUnaryInterceptor(c.intercept)}, nil
}

// refusedCount adds the refused requests not answered yet (tests: none is
// left once every call returned).
func (e *decodeBudget) refusedCount(n *int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.codecs {
		c.refusedMu.Lock()
		*n += len(c.refused)
		c.refusedMu.Unlock()
	}
}

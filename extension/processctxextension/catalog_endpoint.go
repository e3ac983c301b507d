// SPDX-License-Identifier: Apache-2.0

//go:build linux

package processctxextension

import (
	"context"

	"go.uber.org/zap"

	"github.com/otelctx/otelctx/internal/catalogview"
	"github.com/otelctx/otelctx/internal/watcher"
)

// catalogEndpoint serves the catalog on catalog_endpoint while the
// extension runs (nothing when the setting is empty, the default).
type catalogEndpoint struct {
	log *zap.Logger
	srv *catalogview.Server
}

func (c *catalogEndpoint) start(w *watcher.Watcher) error {
	ep := w.Config().CatalogEndpoint
	if ep == "" || c.srv != nil {
		return nil
	}
	srv, err := catalogview.Serve(ep, w.Catalog(), c.log)
	if err != nil {
		return err
	}
	c.srv = srv
	return nil
}

func (c *catalogEndpoint) stop(ctx context.Context) error {
	if c.srv == nil {
		return nil
	}
	err := c.srv.Shutdown(ctx)
	c.srv = nil
	return err
}

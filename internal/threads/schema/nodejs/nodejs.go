// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package nodejs is the nodejs_v1_dev thread-context schema: a TLS variable
// walked through V8's context frame to an OTEP 4947 record
// (internal/format/nodectx).
package nodejs

import (
	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

var Schema = schema.Schema{
	Name:     "nodejs",
	Versions: []string{nodectx.Schema},
	Find:     schema.TLSVariable,
	Symbol:   tlsvar.NodeSymbolName,
	Walk:     layout,
	Sampler:  schema.ReadNodeWalk,
	Snapshot: schema.SnapshotPtrace,
	Source:   publisher.SourceOTEP4947,
}

// layout is the walk for the Node.js build that holds the variable.
func layout(tl processctx.ThreadLocal, loc *tlsvar.Location) (*nodectx.Layout, error) {
	l, err := nodectx.ForModule(tl.Ints, loc.Module)
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package nodejs is the nodejs_v1_dev thread-context schema: a TLS variable
// walked through V8's context frame to an OTEP 4947 record
// (internal/format/nodectx).
package nodejs

import (
	"fmt"

	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// Schema is the schema; the registry lists &Schema.
var Schema nodejs

type nodejs struct{}

var _ schema.VariableSchema = &Schema

func (nodejs) Name() string                    { return "nodejs" }
func (nodejs) Source() string                  { return publisher.SourceOTEP4947 }
func (nodejs) SamplerRead() schema.SamplerRead { return schema.ReadNodeWalk }
func (nodejs) Versions() []string              { return []string{nodectx.Schema} }
func (nodejs) Symbol() string                  { return tlsvar.NodeSymbolName }

// Walk is the layout of the Node.js build that holds the variable.
func (nodejs) Walk(tl processctx.ThreadLocal, loc *tlsvar.Location) (*nodectx.Layout, error) {
	l, err := nodectx.ForModule(tl.Ints, loc.Module)
	if err != nil {
		return nil, err
	}
	return &l, nil
}

// Check: the variable is Node's, and its walk was found.
func (s nodejs) Check(v schema.Variable) error {
	if v.Walk == nil {
		return fmt.Errorf("%w: a %s variable without its walk", schema.ErrSchemaNotHandled, s.Name())
	}
	return schema.CheckSymbol(v.Location, s.Symbol())
}

func (s nodejs) ThreadRecipe(v schema.Variable) (schema.SamplerRecipe, error) {
	if v.Walk == nil {
		return schema.SamplerRecipe{}, fmt.Errorf("%s variable without its walk", s.Name())
	}
	return schema.SamplerRecipe{Read: schema.ReadNodeWalk, Walk: v.Walk}, nil
}

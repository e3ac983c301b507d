// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package otep4947 is the OTEP 4947 thread-context schema: an exported TLS
// variable pointing at the thread's record (internal/format/threadctx).
package otep4947

import (
	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// The schema_version values: the development name and OTEP 4947's.
const (
	VersionTLSDescDev = "tlsdesc_v1_dev"
	VersionTLSV1      = "tls_v1"
)

// Schema is the schema; the registry lists &Schema.
var Schema otep4947

type otep4947 struct{}

var _ schema.VariableSchema = &Schema

func (otep4947) Name() string                    { return "otep4947" }
func (otep4947) Source() string                  { return publisher.SourceOTEP4947 }
func (otep4947) SamplerRead() schema.SamplerRead { return schema.ReadRecordPointer }
func (otep4947) Versions() []string              { return []string{VersionTLSDescDev, VersionTLSV1} }
func (otep4947) Symbol() string                  { return tlsvar.SymbolName }

// Walk: the variable points at the record.
func (otep4947) Walk(processctx.ThreadLocal, *tlsvar.Location) (*nodectx.Layout, error) {
	return nil, nil
}

func (s otep4947) Check(v schema.Variable) error {
	return schema.CheckSymbol(v.Location, s.Symbol())
}

func (otep4947) ThreadRecipe(schema.Variable) (schema.SamplerRecipe, error) {
	return schema.SamplerRecipe{Read: schema.ReadRecordPointer}, nil
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package otep4947 is the OTEP 4947 thread-context schema: an exported TLS
// variable pointing at the thread's record (internal/format/threadctx).
package otep4947

import (
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// The schema_version values: the development name and OTEP 4947's.
const (
	VersionTLSDescDev = "tlsdesc_v1_dev"
	VersionTLSV1      = "tls_v1"
)

var Schema = schema.Schema{
	Name:     "otep4947",
	Versions: []string{VersionTLSDescDev, VersionTLSV1},
	Find:     schema.TLSVariable,
	Symbol:   tlsvar.SymbolName,
	Sampler:  schema.ReadRecordPointer,
	Snapshot: schema.SnapshotPtrace,
	Source:   publisher.SourceOTEP4947,
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package ddring is the DD_OTEL_CTX ring buffer: a buffer of per-thread
// slots discovery finds (internal/scan/ddscan, off by default: the scanner's
// Options.DD) and carries as publisher.Process.DDBuffer.
package ddring

import (
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/schema"
)

var Schema = schema.Schema{
	Name:     "dd_otel_ctx",
	Find:     schema.ProcessBuffer,
	Sampler:  schema.ReadDDSlot,
	Snapshot: schema.SnapshotSlots,
	Source:   publisher.SourceDD,
}

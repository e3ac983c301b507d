// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package ddring is the DD_OTEL_CTX ring buffer: a buffer of per-thread
// slots discovery finds (internal/scan/ddscan, off by default: the scanner's
// Options.DD) and carries as publisher.Process.Buffer, named
// ddotel.SchemaName.
package ddring

import (
	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/schema"
)

var Schema = schema.Schema{
	Name:     ddotel.SchemaName,
	Find:     schema.ProcessBuffer,
	Sampler:  schema.ReadDDSlot,
	Snapshot: schema.SnapshotSlots,
	Source:   publisher.SourceDD,
}

// Layout is b as the format's type, for the readers of its slots (b's
// Schema is Schema.Name: the caller looked it up).
func Layout(b publisher.Buffer) ddotel.Buffer {
	return ddotel.Buffer{Addr: b.Addr, Capacity: b.Capacity, MappingName: b.MappingName}
}

// Reasons a slot read is refused, the label values of dd_slots_refused
// (the eBPF sampler's and the slots reader's).
const (
	RefusedBusy   = "busy"   // in_use set at one of the reads
	RefusedTorn   = "torn"   // the slot changed between the two reads
	RefusedHeader = "header" // the buffer's header changed (an exec): eBPF, not read
)

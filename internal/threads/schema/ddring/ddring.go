// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package ddring is the DD_OTEL_CTX ring buffer: a buffer of per-thread
// slots found in the process's memory rather than through a TLS variable.
// Discovery's plug-in for it, ddscan.Search (a scan.BufferSearch, off by
// default: the watcher adds it from dd_otel_ctx.processes), finds it and
// hands it out as publisher.Process.Buffer with Schema ddotel.SchemaName,
// this schema's Name; Layout turns it back into the format's type for
// the slot readers.
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

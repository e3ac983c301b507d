// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package ddring is the DD_OTEL_CTX ring buffer: a buffer of per-thread
// slots found in the process's memory rather than through a TLS variable.
// Discovery's plug-in for it, ddscan.Search (a scan.BufferSearch, off by
// default: the watcher adds it from dd_otel_ctx.processes), finds it and
// hands it out as publisher.Process.Buffer with Schema ddotel.SchemaName,
// this schema's Name; Slots turns it back into the format's type for the
// slot readers.
package ddring

import (
	"fmt"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/schema"
)

// Schema is the schema; the registry lists &Schema.
var Schema ring

type ring struct{}

var _ schema.BufferSchema = &Schema

func (ring) Name() string                    { return ddotel.SchemaName }
func (ring) Source() string                  { return publisher.SourceDD }
func (ring) SamplerRead() schema.SamplerRead { return schema.ReadDDSlot }

// BufferRecipe: the kernel reads the sampled thread's slot of b, whose
// capacity bounds the slot index it computes.
func (s ring) BufferRecipe(b publisher.Buffer) (schema.SamplerRecipe, error) {
	if b.Capacity == 0 || b.Capacity > ddotel.MaxCapacity || b.Addr == 0 {
		return schema.SamplerRecipe{}, fmt.Errorf("bad %s buffer (addr %#x, capacity %d)", s.Name(), b.Addr, b.Capacity)
	}
	return schema.SamplerRecipe{Read: schema.ReadDDSlot, BufferAddr: b.Addr, BufferCapacity: b.Capacity}, nil
}

// Slots is b as the format's type (b's Schema is Schema's Name: the
// caller looked it up).
func (ring) Slots(b publisher.Buffer) (ddotel.Buffer, error) {
	return Layout(b), nil
}

// Layout is b as the format's type, for the readers of its slots.
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

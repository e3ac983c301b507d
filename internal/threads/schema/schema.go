// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package schema says what a thread-context schema is to the readers. A
// schema is a Go type in its own package under this one, implementing
// Schema and one of the two ways it is found: VariableSchema (a TLS
// variable, read by a snapshot through ptrace) or BufferSchema (a buffer
// discovery finds, whose slots a snapshot reads without stopping threads).
// Its methods carry what the readers used to switch on: the search, the
// eBPF sampler's recipe, the check of what a snapshot reads and the slots
// the judge checks. internal/threads/schema/registry lists the schemas;
// the sampler's callers, the thread sources and the CLI ask it instead of
// naming formats.
package schema

import (
	"errors"
	"fmt"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// Schema is one thread-context schema.
type Schema interface {
	// Name names the schema (logs, docs, a buffer's publisher.Buffer.Schema).
	Name() string
	// Source is the value its records carry into the catalog, the CLI's
	// SOURCE column and the join (a publisher.Source* constant).
	Source() string
	// SamplerRead is the eBPF program's read for it, the kind its
	// refusals are counted by.
	SamplerRead() SamplerRead
}

// VariableSchema is a schema found as an exported thread-local variable:
// tlsvar finds it in the process's modules, the process context's
// threadlocal.schema_version announces it, and a snapshot reads it by
// stopping each thread in turn (internal/threads/threadread).
type VariableSchema interface {
	Schema
	// Versions are the threadlocal.schema_version values announcing it.
	Versions() []string
	// Symbol is the TLS variable its writers export.
	Symbol() string
	// Walk is the layout from the variable to the record for a process
	// that announces tl (nil: the variable points at the record).
	Walk(tl processctx.ThreadLocal, loc *tlsvar.Location) (*nodectx.Layout, error)
	// Check: v is a variable of this schema a reader can read (its own
	// symbol, its walk when it has one).
	Check(v Variable) error
	// ThreadRecipe is what the eBPF program reads from v.
	ThreadRecipe(v Variable) (SamplerRecipe, error)
}

// BufferSchema is a schema found as a buffer in the process's memory: a
// search discovery runs (internal/scan) hands it out as
// publisher.Process.Buffer, whose Schema is the schema's Name.
type BufferSchema interface {
	Schema
	// BufferRecipe is what the eBPF program reads in b.
	BufferRecipe(b publisher.Buffer) (SamplerRecipe, error)
	// Slots is b as per-thread slots (ddotel's layout, the one buffer
	// layout the slot snapshot and the judge of sampled slots read).
	Slots(b publisher.Buffer) (ddotel.Buffer, error)
}

// SamplerRead is one of the eBPF sampler program's reads (the BPF C
// program knows each; a schema's recipe chooses one and fills it).
type SamplerRead int

const (
	// ReadRecordPointer: the variable points at an OTEP 4947 record.
	ReadRecordPointer SamplerRead = iota + 1
	// ReadNodeWalk: the variable is walked to the record (nodectx.Layout).
	ReadNodeWalk
	// ReadDDSlot: the sampled thread's DD_OTEL_CTX slot, by its TID.
	ReadDDSlot
)

// SamplerRecipe is a schema's part of the eBPF sampler's recipe for a
// process: what the program does from the variable, or where the buffer
// it reads is.
type SamplerRecipe struct {
	Read SamplerRead
	// Walk is the layout walked from the variable (ReadNodeWalk).
	Walk *nodectx.Layout
	// BufferAddr, BufferCapacity: the buffer of slots (ReadDDSlot).
	BufferAddr     uint64
	BufferCapacity uint32
}

var (
	ErrNoSchema         = errors.New("process context has no threadlocal.schema_version (no thread contexts published)")
	ErrSchemaNotHandled = errors.New("thread-local schema not handled by this reader")
)

// Missing lists the pieces s lacks; a registered schema has none.
func Missing(s Schema) []string {
	if s == nil {
		return []string{"a schema"}
	}
	var m []string
	need := func(ok bool, piece string) {
		if !ok {
			m = append(m, piece)
		}
	}
	need(s.Name() != "", "name")
	need(s.SamplerRead() >= ReadRecordPointer && s.SamplerRead() <= ReadDDSlot, "what the eBPF sampler reads")
	need(s.Source() != "", "the source its records carry")
	v, isVar := s.(VariableSchema)
	_, isBuf := s.(BufferSchema)
	need(isVar != isBuf, "how it is found (a TLS variable or a process buffer, one of them)")
	if isVar {
		need(len(v.Versions()) > 0, "the schema_version values announcing it")
		need(v.Symbol() != "", "its TLS variable")
	}
	return m
}

// Variable is a process's thread variable found for its schema: where it
// is, and the walk to the record (nil: the variable points at it).
type Variable struct {
	Schema   Schema
	Location *tlsvar.Location
	Walk     *nodectx.Layout
}

// Ptr is v, or nil when no variable was found (the zero Variable).
func (v Variable) Ptr() *Variable {
	if v.Location == nil {
		return nil
	}
	return &v
}

// Checked is v's schema when v is a variable its schema reads (its
// VariableSchema.Check): ErrSchemaNotHandled for a schema not found as a
// variable.
func (v Variable) Checked() (VariableSchema, error) {
	if v.Schema == nil || v.Location == nil {
		return nil, errors.New("no variable (no schema or no location)")
	}
	vs, ok := v.Schema.(VariableSchema)
	if !ok {
		return nil, fmt.Errorf("%w: %s is not read from a thread variable", ErrSchemaNotHandled, v.Schema.Name())
	}
	if err := vs.Check(v); err != nil {
		return nil, err
	}
	return vs, nil
}

// CheckSymbol: the variable found must be the schema's.
func CheckSymbol(loc *tlsvar.Location, want string) error {
	got := loc.Symbol
	if got == "" {
		got = tlsvar.SymbolName
	}
	if got != want {
		return fmt.Errorf("%w: the schema's variable is %s, the process exports %s", ErrSchemaNotHandled, want, got)
	}
	return nil
}

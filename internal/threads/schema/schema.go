// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package schema says what a thread-context schema is to the readers: how
// its variable or buffer is found, what the eBPF sampler and a snapshot read
// for it, and the source its records carry. Each schema is a package under
// this one; internal/threads/schema/registry lists them, and the sampler's
// callers, the thread sources and the CLI ask the registry instead of
// naming formats.
package schema

import (
	"errors"
	"fmt"

	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// Find is how a schema's per-thread data is found in a process.
type Find int

const (
	// TLSVariable: an exported thread-local variable, found by tlsvar in
	// the process's modules (Schema.Symbol), announced by the process
	// context's threadlocal.schema_version (Schema.Versions).
	TLSVariable Find = iota + 1
	// ProcessBuffer: a buffer discovery finds in the process's memory
	// (internal/scan) and carries on publisher.Process.
	ProcessBuffer
)

func (f Find) String() string {
	switch f {
	case TLSVariable:
		return "TLS variable"
	case ProcessBuffer:
		return "process buffer"
	}
	return "unknown"
}

// SamplerRead is what the eBPF sampler's program reads for a schema at a
// sample (the BPF C program knows each; the Go side fills its recipe).
type SamplerRead int

const (
	// ReadRecordPointer: the variable points at an OTEP 4947 record.
	ReadRecordPointer SamplerRead = iota + 1
	// ReadNodeWalk: the variable is walked to the record (nodectx.Layout).
	ReadNodeWalk
	// ReadDDSlot: the sampled thread's DD_OTEL_CTX slot, by its TID.
	ReadDDSlot
)

// SnapshotRead is how the ptrace thread source and the CLI's snapshot read
// a schema.
type SnapshotRead int

const (
	// SnapshotPtrace: each thread stopped in turn, its variable read
	// (internal/threads/threadread).
	SnapshotPtrace SnapshotRead = iota + 1
	// SnapshotSlots: the slots read without stopping the threads
	// (internal/threads/ddslots).
	SnapshotSlots
)

// Schema is one thread-context schema.
type Schema struct {
	// Name names the schema (logs, docs, the registry's test).
	Name string
	// Versions are the threadlocal.schema_version values announcing it
	// (TLSVariable).
	Versions []string
	Find     Find
	// Symbol is the TLS variable its writers export (TLSVariable).
	Symbol string
	// Walk is the layout from the variable to the record for a process
	// that announces tl (ReadNodeWalk; nil: the variable points at it).
	Walk    func(tl processctx.ThreadLocal, loc *tlsvar.Location) (*nodectx.Layout, error)
	Sampler SamplerRead
	// Snapshot is how a snapshot reads it.
	Snapshot SnapshotRead
	// Source is the value its records carry into the catalog, the CLI's
	// SOURCE column and the join (a publisher.Source* constant).
	Source string
}

var (
	ErrNoSchema         = errors.New("process context has no threadlocal.schema_version (no thread contexts published)")
	ErrSchemaNotHandled = errors.New("thread-local schema not handled by this reader")
)

// Missing lists the pieces s lacks; a registered schema has none.
func (s Schema) Missing() []string {
	var m []string
	need := func(ok bool, piece string) {
		if !ok {
			m = append(m, piece)
		}
	}
	need(s.Name != "", "name")
	need(s.Find == TLSVariable || s.Find == ProcessBuffer, "how it is found")
	need(s.Sampler >= ReadRecordPointer && s.Sampler <= ReadDDSlot, "what the eBPF sampler reads")
	need(s.Snapshot == SnapshotPtrace || s.Snapshot == SnapshotSlots, "how a snapshot reads it")
	need(s.Source != "", "the source its records carry")
	if s.Find == TLSVariable {
		need(len(s.Versions) > 0, "the schema_version values announcing it")
		need(s.Symbol != "", "its TLS variable")
	}
	need((s.Sampler == ReadNodeWalk) == (s.Walk != nil), "a walk exactly when the sampler walks")
	return m
}

// Variable is a process's thread variable found for its schema: where it
// is, and the walk to the record (nil: the variable points at it).
type Variable struct {
	Schema   *Schema
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

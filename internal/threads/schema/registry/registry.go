// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package registry lists the thread-context schemas the readers know, and
// finds a process's thread variable for its schema: the one path the CLI
// and both thread sources take.
package registry

import (
	"fmt"
	"strings"

	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring"
	"github.com/otelctx/otelctx/internal/threads/schema/nodejs"
	"github.com/otelctx/otelctx/internal/threads/schema/otep4947"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// All is every schema the readers know, one line each.
var All = []schema.Schema{
	&otep4947.Schema,
	&nodejs.Schema,
	&ddring.Schema,
}

// notRead are schema_version values publishers announce whose thread
// contexts no reader here reads, and why.
var notRead = map[string]string{
	"go_pprof_labels_v1": "Go publishes pprof labels, read by the eBPF profiler, not a TLS record",
}

// ForVersion is the schema a process announcing threadlocal.schema_version
// v has: ErrNoSchema for none, ErrSchemaNotHandled for one no reader reads.
func ForVersion(v string) (schema.VariableSchema, error) {
	if v == "" {
		return nil, schema.ErrNoSchema
	}
	var known []string
	for _, s := range All {
		s, ok := s.(schema.VariableSchema)
		if !ok {
			continue
		}
		for _, sv := range s.Versions() {
			if sv == v {
				return s, nil
			}
			known = append(known, sv)
		}
	}
	if why, ok := notRead[v]; ok {
		return nil, fmt.Errorf("%w: %q (%s)", schema.ErrSchemaNotHandled, v, why)
	}
	return nil, fmt.Errorf("%w: %q (known: %s)", schema.ErrSchemaNotHandled, v, strings.Join(known, ", "))
}

// ForBuffer is the schema of a buffer discovery found (publisher.Buffer's
// Schema names it): an error for a name no schema has, or a schema not
// found as a process buffer.
func ForBuffer(b publisher.Buffer) (schema.BufferSchema, error) {
	var known []string
	for _, s := range All {
		s, ok := s.(schema.BufferSchema)
		if !ok {
			continue
		}
		if s.Name() == b.Schema {
			return s, nil
		}
		known = append(known, s.Name())
	}
	return nil, fmt.Errorf("%w: buffer schema %q (buffer schemas: %s)", schema.ErrSchemaNotHandled, b.Schema, strings.Join(known, ", "))
}

// Announced reports whether tl announces a schema whose variable the
// readers find.
func Announced(tl processctx.ThreadLocal) bool {
	_, err := ForVersion(tl.SchemaVersion)
	return err == nil
}

// Locate finds the thread variable of a process whose context has tl:
// its schema (ForVersion), where the variable is (resolve: tlsvar.Resolve
// or a cache of it), the walk to the record, and that the variable found is
// the schema's. A failed resolve is returned as is, wrapped in a
// ResolveError; the others say the schema or its variable is not one the
// readers handle.
func Locate(tl processctx.ThreadLocal, resolve func() (*tlsvar.Location, error)) (schema.Variable, error) {
	s, err := ForVersion(tl.SchemaVersion)
	if err != nil {
		return schema.Variable{}, err
	}
	loc, err := resolve()
	if err != nil {
		return schema.Variable{}, &ResolveError{Symbol: s.Symbol(), Err: err}
	}
	return check(s, tl, loc)
}

// check is Locate's last part, for a variable already resolved: the walk
// to the record, and that the variable is the schema's.
func check(s schema.VariableSchema, tl processctx.ThreadLocal, loc *tlsvar.Location) (schema.Variable, error) {
	w, err := s.Walk(tl, loc)
	if err != nil {
		return schema.Variable{}, err
	}
	v := schema.Variable{Schema: s, Location: loc, Walk: w}
	if err := s.Check(v); err != nil {
		return schema.Variable{}, err
	}
	return v, nil
}

// ResolveError: the schema's variable could not be located.
type ResolveError struct {
	Symbol string
	Err    error
}

func (e *ResolveError) Error() string { return "cannot locate " + e.Symbol + ": " + e.Err.Error() }
func (e *ResolveError) Unwrap() error { return e.Err }

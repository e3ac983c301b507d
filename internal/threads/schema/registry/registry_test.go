// SPDX-License-Identifier: Apache-2.0

//go:build linux

package registry

import (
	"errors"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/format/processctx"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// TestSchemasProvide lists what each registered schema provides, and fails
// when one lacks a piece the readers ask the registry for.
func TestSchemasProvide(t *testing.T) {
	if len(All) == 0 {
		t.Fatal("no schema registered")
	}
	names := map[string]bool{}
	versions := map[string]string{}
	for _, s := range All {
		t.Logf("%s (%T): sampler read %d, source %q", s.Name(), s, s.SamplerRead(), s.Source())
		if m := schema.Missing(s); len(m) > 0 {
			t.Errorf("schema %q lacks: %s", s.Name(), strings.Join(m, ", "))
		}
		if names[s.Name()] {
			t.Errorf("schema %q registered twice", s.Name())
		}
		names[s.Name()] = true
		vs, ok := s.(schema.VariableSchema)
		if !ok {
			continue
		}
		for _, v := range vs.Versions() {
			if other, dup := versions[v]; dup {
				t.Errorf("schema_version %q announces both %s and %s", v, other, s.Name())
			}
			versions[v] = s.Name()
			if got, err := ForVersion(v); err != nil || got != s {
				t.Errorf("ForVersion(%q) = %v, %v; want %s", v, got, err, s.Name())
			}
		}
	}
}

// TestMissing: the completeness check itself fails on a schema lacking a
// piece.
func TestMissing(t *testing.T) {
	for _, tc := range []struct {
		s    schema.Schema
		want string
	}{
		{partial{}, "name"},
		{partialVariable{partial{name: "x", read: schema.ReadRecordPointer, source: "s"}, []string{"v"}, ""}, "its TLS variable"},
		{partial{name: "x", source: "s"}, "what the eBPF sampler reads"},
		{partial{name: "x", read: schema.ReadRecordPointer, source: "s"}, "how it is found"},
		{partialVariable{partial{name: "x", read: schema.ReadRecordPointer}, []string{"v"}, "v"}, "the source its records carry"},
	} {
		if m := schema.Missing(tc.s); !strings.Contains(strings.Join(m, ", "), tc.want) {
			t.Errorf("%+v: missing %v, want %q among them", tc.s, m, tc.want)
		}
	}
}

// partial is a schema with the pieces its fields give, found neither way.
type partial struct {
	name, source string
	read         schema.SamplerRead
}

func (p partial) Name() string                    { return p.name }
func (p partial) Source() string                  { return p.source }
func (p partial) SamplerRead() schema.SamplerRead { return p.read }

// partialVariable is a partial schema found as a TLS variable.
type partialVariable struct {
	partial
	versions []string
	symbol   string
}

func (p partialVariable) Versions() []string { return p.versions }
func (p partialVariable) Symbol() string     { return p.symbol }
func (partialVariable) Walk(processctx.ThreadLocal, *tlsvar.Location) (*nodectx.Layout, error) {
	return nil, nil
}
func (partialVariable) Check(schema.Variable) error { return nil }
func (partialVariable) ThreadRecipe(schema.Variable) (schema.SamplerRecipe, error) {
	return schema.SamplerRecipe{}, nil
}

func TestForVersion(t *testing.T) {
	for v, want := range map[string]error{
		"tlsdesc_v1_dev":     nil,
		"tls_v1":             nil,
		"nodejs_v1_dev":      nil,
		"":                   schema.ErrNoSchema,
		"go_pprof_labels_v1": schema.ErrSchemaNotHandled,
		"tls_v9":             schema.ErrSchemaNotHandled,
	} {
		_, err := ForVersion(v)
		if !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Errorf("%q: %v, want %v", v, err, want)
		}
		if v == "go_pprof_labels_v1" && !strings.Contains(err.Error(), "not handled by this reader") {
			t.Errorf("go_pprof_labels_v1: unclear error %q", err)
		}
	}
}

// TestForBuffer: a buffer's schema by its name; a name no schema has, or a
// schema found as a TLS variable, is refused.
func TestForBuffer(t *testing.T) {
	for _, s := range All {
		got, err := ForBuffer(publisher.Buffer{Schema: s.Name()})
		_, isBuffer := s.(schema.BufferSchema)
		if isBuffer && (err != nil || got != s) {
			t.Errorf("%s: %v, %v", s.Name(), got, err)
		}
		if !isBuffer && !errors.Is(err, schema.ErrSchemaNotHandled) {
			t.Errorf("%s, found as %T, taken as a buffer's schema: %v", s.Name(), s, err)
		}
	}
	if _, err := ForBuffer(publisher.Buffer{Schema: "nope"}); !errors.Is(err, schema.ErrSchemaNotHandled) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown buffer schema: %v", err)
	}
}

// TestLocate: one path from the schema to its checked variable; a failed
// resolution is a ResolveError naming the schema's variable, a variable of
// another schema is refused.
func TestLocate(t *testing.T) {
	otep := processctx.ThreadLocal{SchemaVersion: "tls_v1"}
	loc := &tlsvar.Location{Symbol: tlsvar.SymbolName}
	v, err := Locate(otep, func() (*tlsvar.Location, error) { return loc, nil })
	if err != nil || v.Location != loc || v.Walk != nil || v.Schema.(schema.VariableSchema).Symbol() != tlsvar.SymbolName {
		t.Fatalf("OTEP 4947: %+v, %v", v, err)
	}
	_, err = Locate(otep, func() (*tlsvar.Location, error) { return nil, tlsvar.ErrNotFound })
	var re *ResolveError
	if !errors.As(err, &re) || !errors.Is(err, tlsvar.ErrNotFound) || !strings.Contains(err.Error(), "cannot locate "+tlsvar.SymbolName) {
		t.Errorf("failed resolution: %v", err)
	}
	_, err = Locate(otep, func() (*tlsvar.Location, error) { return &tlsvar.Location{Symbol: tlsvar.NodeSymbolName}, nil })
	if !errors.Is(err, schema.ErrSchemaNotHandled) {
		t.Errorf("Node's variable for an OTEP 4947 schema: %v", err)
	}
	resolved := false
	_, err = Locate(processctx.ThreadLocal{}, func() (*tlsvar.Location, error) { resolved = true; return loc, nil })
	if !errors.Is(err, schema.ErrNoSchema) || resolved {
		t.Errorf("no schema: %v (resolved %v)", err, resolved)
	}
	// A Node.js variable in a module naming no Node ABI, with no layout
	// published: the walk is unknown.
	node := processctx.ThreadLocal{SchemaVersion: "nodejs_v1_dev"}
	if _, err := Locate(node, func() (*tlsvar.Location, error) {
		return &tlsvar.Location{Symbol: tlsvar.NodeSymbolName, Module: "/usr/bin/notnode"}, nil
	}); err == nil {
		t.Error("Node.js variable without a known layout: located")
	}
}

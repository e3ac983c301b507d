// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadsource

import (
	"testing"

	"github.com/otelctx/otelctx/internal/format/nodectx"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/nodejs"
	"github.com/otelctx/otelctx/internal/threads/schema/otep4947"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// TestSameVariable: a republished context keeps the kernel's recipe only
// when it reads the same variable the same way; a Node process that
// publishes another layout is tracked anew (its walk changed).
func TestSameVariable(t *testing.T) {
	loc := &tlsvar.Location{Symbol: tlsvar.NodeSymbolName}
	walk := nodectx.Layout{TaggedSize: 8, JSMapTableOffset: 24, OrderedHashMapHeaderSize: 24, WrappedObjectOffset: 24}
	moved := walk
	moved.WrappedObjectOffset = 32
	node := func(l nodectx.Layout) schema.Variable {
		return schema.Variable{Schema: &nodejs.Schema, Location: loc, Walk: &l}
	}
	for _, c := range []struct {
		name string
		a, b schema.Variable
		same bool
	}{
		{"same walk, another copy", node(walk), node(walk), true},
		{"walk changed", node(walk), node(moved), false},
		{"walk gone", node(walk), schema.Variable{Schema: &nodejs.Schema, Location: loc}, false},
		{"another schema", schema.Variable{Schema: &otep4947.Schema, Location: loc}, schema.Variable{Schema: &nodejs.Schema, Location: loc}, false},
		{"another location", node(walk), schema.Variable{Schema: &nodejs.Schema, Location: &tlsvar.Location{}, Walk: &walk}, false},
		{"no variable either time", schema.Variable{}, schema.Variable{}, true},
	} {
		if got := sameVariable(c.a, c.b); got != c.same {
			t.Errorf("%s: sameVariable %v, want %v", c.name, got, c.same)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package buffers_test

import (
	"slices"
	"testing"

	"github.com/otelctx/otelctx/internal/scan/buffers"
	"github.com/otelctx/otelctx/internal/threads/schema"
	"github.com/otelctx/otelctx/internal/threads/schema/registry"
)

// The searches and the registry's process-buffer schemas are the same
// set: a buffer discovery finds is one a reader knows, and a schema the
// readers know as a process buffer has a search.
func TestSearchesMatchRegistry(t *testing.T) {
	var searched, registered []string
	for _, s := range buffers.All() {
		if sc := s.Scope(); !sc.Every {
			t.Errorf("%s: scope %+v, want every process", s.Schema(), sc)
		}
		searched = append(searched, s.Schema())
	}
	for _, s := range registry.All {
		if _, ok := s.(schema.BufferSchema); ok {
			registered = append(registered, s.Name())
		}
	}
	slices.Sort(searched)
	slices.Sort(registered)
	if len(searched) == 0 || !slices.Equal(searched, registered) {
		t.Fatalf("buffer searches %v, registry's process-buffer schemas %v", searched, registered)
	}
}

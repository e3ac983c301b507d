// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddring_test

import (
	"testing"

	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/publisher"
	"github.com/otelctx/otelctx/internal/threads/schema/ddring"
)

// The format's name is the schema's and the records' source: the data
// model spells it itself (publisher does not import the format).
func TestOneName(t *testing.T) {
	if ddring.Schema.Name() != ddotel.SchemaName || publisher.SourceDD != ddotel.SchemaName || ddring.Schema.Source() != ddotel.SchemaName {
		t.Fatalf("schema %q, source %q, schema source %q; the format is %q",
			ddring.Schema.Name(), publisher.SourceDD, ddring.Schema.Source(), ddotel.SchemaName)
	}
}

func TestLayout(t *testing.T) {
	b := publisher.Buffer{Schema: ddotel.SchemaName, Addr: 0x7f0000001000, Capacity: 64, MappingName: "DD_OTEL_CTX"}
	want := ddotel.Buffer{Addr: 0x7f0000001000, Capacity: 64, MappingName: "DD_OTEL_CTX"}
	if got := ddring.Layout(b); got != want {
		t.Fatalf("Layout(%+v) = %+v, want %+v", b, got, want)
	}
}

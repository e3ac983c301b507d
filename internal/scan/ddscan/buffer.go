// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ddscan

import (
	"github.com/otelctx/otelctx/internal/format/ddotel"
	"github.com/otelctx/otelctx/internal/publisher"
)

// Model is b as discovery hands it out: a buffer of the format's schema
// (the readers find how to read it in the registry by that name).
func Model(b ddotel.Buffer) publisher.Buffer {
	return publisher.Buffer{Schema: ddotel.SchemaName, Addr: b.Addr, Capacity: b.Capacity, MappingName: b.MappingName}
}

// Layout is a buffer Model made, as the format's type again (Revalidate's).
func Layout(b publisher.Buffer) ddotel.Buffer {
	return ddotel.Buffer{Addr: b.Addr, Capacity: b.Capacity, MappingName: b.MappingName}
}

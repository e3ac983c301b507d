// SPDX-License-Identifier: Apache-2.0

//go:build linux

package publisher

// Thread-context sources: where a thread's record was read. Thread readers
// set one, the catalog keeps it, consumers join records the same way
// whatever it is.
const (
	// SourceOTEP4947: an OTEP 4947 TLS record.
	SourceOTEP4947 = "otep4947"
	// SourceDD: a DD_OTEL_CTX slot (ids only: no flags, no attributes);
	// the format's name, ddotel.SchemaName (a test in
	// internal/threads/schema/ddring holds them equal: the data model does
	// not import the format).
	SourceDD = "dd_otel_ctx"
)

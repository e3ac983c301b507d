// SPDX-License-Identifier: Apache-2.0

// Package e2e tests the otelctx Collector distribution as a user runs it: the
// binary built by the collector builder from builder-config.yaml, a real
// process publishing an OpenTelemetry process context, and the entity events
// the distribution writes through the file exporter.
//
// The test needs the binary: `make test` and `make e2e` build it and pass its
// path in OTELCTX_DIST_BIN. Without it the test skips, or fails under CI=true.
package e2e

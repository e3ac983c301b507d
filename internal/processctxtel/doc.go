// SPDX-License-Identifier: Apache-2.0

// Package processctxtel is the processctx extension's telemetry: its
// TelemetryBuilder (the instruments of its metadata.yaml, registered once)
// and the labelled instruments the watcher and the thread sources record
// through (one attribute, its option sets built once).
package processctxtel

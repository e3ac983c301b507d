// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package buffers lists the known thread-context buffer searches
// (scan.BufferSearch), one per schema found as a process buffer: a caller
// asked about one process (the CLI) searches it with each without naming
// a format. The collector's scanner is given its searches by the watcher,
// from the user's configuration, not from here. Adding a buffer schema
// adds its search to All.
package buffers

import (
	"github.com/otelctx/otelctx/internal/scan"
	"github.com/otelctx/otelctx/internal/scan/ddscan"
)

// All returns every known buffer search, each over every process (the
// CLI's process is the one asked about, whatever its executable). Each
// Schema is the name of a registry schema found as a process buffer.
func All() []scan.BufferSearch {
	return []scan.BufferSearch{ddscan.New(ddscan.SearchAll)}
}

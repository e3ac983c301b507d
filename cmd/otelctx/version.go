// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"fmt"
	"io"

	"github.com/otelctx/otelctx/internal/version"
)

// versionRequested reports whether the command line asks only for the
// version (--version or -version, first).
func versionRequested(args []string) bool {
	return len(args) > 0 && (args[0] == "--version" || args[0] == "-version")
}

// printVersion writes "otelctx version V" (V from the VERSION file, see
// internal/version).
func printVersion(w io.Writer) {
	fmt.Fprintf(w, "otelctx version %s\n", version.String())
}

// SPDX-License-Identifier: Apache-2.0

//go:build !linux

// Command otelctx is the debugging CLI of the process-context reader; what
// it reads (/proc, process memory, ptrace, eBPF) exists only on Linux.
package main

import (
	"fmt"
	"os"
	"runtime"
)

func main() {
	fmt.Fprintf(os.Stderr, "otelctx: only supported on Linux, not %s\n", runtime.GOOS)
	os.Exit(1)
}

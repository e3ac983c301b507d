// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar_test

import (
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
	"github.com/otelctx/otelctx/internal/threads/tlsvar"
)

// BenchmarkResolveCells resolves every conformance cell (one writer style:
// the files are the same for both) with a new Resolver each time, so every
// mapped ELF file is parsed: the reader's cost on real glibc and musl
// processes, static and dynamic, .dynsym and .symtab.
func BenchmarkResolveCells(b *testing.B) {
	testenv.RequireRoot(b)
	var pids []int
	for _, c := range threadpub.Matrix() {
		if c.Writer != threadpub.PointerSwap {
			continue
		}
		pids = append(pids, threadpub.Start(b, c).PID)
	}
	b.ResetTimer()
	for b.Loop() {
		for _, pid := range pids {
			if _, err := tlsvar.NewResolver("/proc").Resolve(pid); err != nil {
				b.Fatal(err)
			}
		}
	}
}

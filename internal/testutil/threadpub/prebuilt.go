// SPDX-License-Identifier: Apache-2.0

//go:build linux

package threadpub

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/testpub"
)

// CellDir is where BuildAt puts a cell's build under root (and where Build
// finds it with testpub.PrebuiltEnv=root).
func CellDir(root string, c Cell) string { return filepath.Join(root, "threadpub", c.buildKey()) }

// prebuilt: the cell's executable and arguments as a build would make them,
// from a directory BuildAt filled.
func prebuilt(tb testing.TB, c Cell, root string) (exe string, args []string) {
	tb.Helper()
	cb := &cellBuild{tb: tb, c: c, dir: CellDir(root, c), dry: true}
	exe, args = cb.build()
	return testpub.Prebuilt(tb, exe), args
}

// BuildAt compiles the cell with cc, a compiler for goarch, into
// CellDir(root, c), for a machine without a compiler (test/vm's guests;
// paths inside the build, rpath and --lib, are those of the guest, so root
// must be the same path there).
func BuildAt(tb testing.TB, c Cell, cc, goarch, root string) {
	tb.Helper()
	dir := CellDir(root, c)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	cb := &cellBuild{tb: tb, cc: cc, c: c, dir: dir, goarch: goarch}
	cb.build()
}

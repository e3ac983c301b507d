// SPDX-License-Identifier: Apache-2.0

//go:build linux

package vm

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/ddwriter"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/testutil/testpub"
	"github.com/otelctx/otelctx/internal/testutil/threadpub"
)

// Toolchain is how C fixtures are built and run for one architecture: the
// compiler of each C library ("" with the reason in NoCC when there is
// none), and the host files of the dynamic loaders and libraries a guest
// needs to run dynamic executables, by guest path.
type Toolchain struct {
	CC   map[testpub.Libc]string
	NoCC map[testpub.Libc]string
	Libs map[string]string
}

func Toolchains(goarch string) Toolchain {
	switch goarch {
	case "amd64":
		libs := map[string]string{
			"/lib64/ld-linux-x86-64.so.2": "/lib64/ld-linux-x86-64.so.2",
			"/lib/ld-musl-x86_64.so.1":    "/lib/ld-musl-x86_64.so.1",
		}
		for _, l := range glibcLibs {
			libs["/lib/x86_64-linux-gnu/"+l] = "/lib/x86_64-linux-gnu/" + l
		}
		return Toolchain{CC: map[testpub.Libc]string{testpub.Glibc: "gcc", testpub.Musl: "musl-gcc"}, Libs: libs}
	case "arm64":
		const cross = "/usr/aarch64-linux-gnu/lib/"
		libs := map[string]string{
			"/lib/ld-linux-aarch64.so.1": cross + "ld-linux-aarch64.so.1",
			"/lib/ld-musl-aarch64.so.1":  "/lib/ld-musl-aarch64.so.1",
		}
		for _, l := range glibcLibs {
			libs["/lib/aarch64-linux-gnu/"+l] = cross + l
		}
		// aarch64-linux-musl-gcc: musl-dev:arm64's wrapper of the glibc
		// cross compiler with musl's specs.
		return Toolchain{
			CC:   map[testpub.Libc]string{testpub.Glibc: "aarch64-linux-gnu-gcc", testpub.Musl: "aarch64-linux-musl-gcc"},
			Libs: libs,
		}
	}
	return Toolchain{}
}

var glibcLibs = []string{"libc.so.6", "libdl.so.2", "libpthread.so.0", "libm.so.6"}

// fixtureCells: the whole matrix and the variants tests start.
func fixtureCells() []threadpub.Cell {
	cells := threadpub.Matrix()
	for _, v := range []threadpub.Variant{threadpub.NotTLS, threadpub.Protected, threadpub.Hidden, threadpub.LocalDynamic, threadpub.ExeAccess} {
		cells = append(cells, threadpub.Cell{Libc: threadpub.Glibc, Where: threadpub.SharedLib, Dialect: threadpub.TLSDESC, Variant: v})
	}
	return cells
}

var fixtureLocks sync.Map // GOARCH -> *sync.Mutex

// testbin is a fixture CompileC builds (testpub, ddwriter, the ptrace
// spinner).
type testbin struct {
	name, src string
	libc      testpub.Libc
	flags     []string
}

func testbins(tb testing.TB) []testbin {
	var out []testbin
	for _, l := range testpub.Libcs {
		out = append(out,
			testbin{testpub.PublisherName(l), testpub.Source(), l, testpub.PublisherFlags},
			testbin{ddwriter.Name(l), ddwriter.Source(), l, ddwriter.Flags(tb)},
			// As test/enrich's envspin.
			testbin{"envspin-" + string(l), filepath.Join(RepoRoot(), "test", "enrich", "testdata", "envspin.c"), l, []string{"-O2", "-Wall"}})
	}
	// As internal/threads/ptrace's buildSpinner.
	spinner := filepath.Join(RepoRoot(), "internal", "threads", "ptrace", "testdata", "spinner.c")
	return append(out, testbin{"spinner", spinner, testpub.Glibc, []string{"-O2", "-Wall", "-pthread"}})
}

// BuildFixtures builds every fixture for goarch under cache (once per
// content: sources, their builders and the compilers) and returns its
// directory, which the guest must see at the same path
// (testpub.PrebuiltEnv).
func BuildFixtures(tb testing.TB, goarch, cache string) string {
	tb.Helper()
	// Boots of one architecture (amd64's 6.1 and 6.12) share its fixtures:
	// one builds them, the others wait.
	mu, _ := fixtureLocks.LoadOrStore(goarch, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	tc := Toolchains(goarch)
	if tc.NoCC == nil {
		tc.NoCC = map[testpub.Libc]string{}
	}
	for l, cc := range tc.CC {
		if _, err := exec.LookPath(cc); err != nil {
			if testenv.InCI() {
				tb.Fatalf("%s missing: make vm-deps installs it", cc)
			}
			// Locally the cells of that C library skip in the guest.
			delete(tc.CC, l)
			tc.NoCC[l] = cc + " missing (make vm-deps installs it)"
		}
	}
	key, err := fixturesKey(tc)
	if err != nil {
		tb.Fatal(err)
	}
	root := filepath.Join(cache, "fx", goarch+"-"+key)
	if _, err := os.Stat(filepath.Join(root, ".complete")); err == nil {
		return root
	}
	if err := os.RemoveAll(root); err != nil {
		tb.Fatal(err)
	}
	for _, b := range testbins(tb) {
		out := filepath.Join(root, "testbin", b.name)
		if cc := tc.CC[b.libc]; cc != "" {
			testpub.CompileAt(tb, cc, out, b.src, b.flags...)
		} else {
			writeUnavailable(tb, out, tc.NoCC[b.libc])
		}
	}
	seen := map[string]bool{}
	for _, c := range fixtureCells() {
		dir := threadpub.CellDir(root, c)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		if cc := tc.CC[testpub.Libc(c.Libc)]; cc != "" {
			threadpub.BuildAt(tb, c, cc, goarch, root)
		} else {
			writeUnavailable(tb, filepath.Join(dir, "threadpub"), tc.NoCC[testpub.Libc(c.Libc)])
		}
	}
	if err := os.WriteFile(filepath.Join(root, ".complete"), nil, 0o644); err != nil {
		tb.Fatal(err)
	}
	return root
}

func writeUnavailable(tb testing.TB, path, why string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path+testpub.Unavailable, []byte(why+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// fixturesKey hashes what the fixtures are built from.
func fixturesKey(tc Toolchain) (string, error) {
	h := sha256.New()
	root := RepoRoot()
	var files []string
	for _, g := range []string{"testdata/publishers/*",
		"internal/testutil/threadpub/*.go", "internal/testutil/testpub/*.go", "internal/testutil/ddwriter/*.go",
		"internal/threads/ptrace/testdata/*", "test/vm/fixtures.go"} {
		m, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			return "", err
		}
		files = append(files, m...)
	}
	for _, l := range slices.Sorted(maps.Keys(tc.CC)) {
		fmt.Fprintf(h, "%s=%s\n", l, tc.CC[l])
	}
	for _, f := range files {
		if err := hashFile(h, f); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

func hashFile(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(h, "%s\n", path)
	_, err = io.Copy(h, f)
	return err
}

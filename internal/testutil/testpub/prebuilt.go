// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testpub

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// PrebuiltEnv names a directory of C fixtures built beforehand, for a
// machine without a compiler (test/vm's guests): CompileC then returns
// DIR/testbin/NAME instead of compiling (threadpub.Build: DIR/threadpub/CELL).
const PrebuiltEnv = "OTELCTX_PREBUILT"

// Unavailable is the suffix of a file that stands for a fixture that cannot
// be built for that machine (no cross compiler for its C library): it holds
// the reason, and the test skips with it (fails under CI=true, as any
// missing tool does).
const Unavailable = ".unavailable"

// PrebuiltDir is the prebuilt fixtures' directory, "" when tests compile.
func PrebuiltDir() string { return os.Getenv(PrebuiltEnv) }

// Prebuilt returns the prebuilt fixture at path: a missing one fails the
// test (the harness did not build it), an unavailable one skips (fails
// under CI=true: test/vm's guests run with it).
func Prebuilt(tb testing.TB, path string) string {
	tb.Helper()
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if why, err := os.ReadFile(path + Unavailable); err == nil {
		testenv.Missing(tb, fmt.Sprintf("prebuilt fixture %s unavailable: %s", filepath.Base(path), strings.TrimSpace(string(why))))
	}
	tb.Fatalf("%s=%s: prebuilt fixture %s missing", PrebuiltEnv, PrebuiltDir(), path)
	return ""
}

// Compiler returns the compiler of libc, "" with prebuilt fixtures; a
// missing compiler skips (fails under CI=true).
func Compiler(tb testing.TB, libc Libc) string {
	tb.Helper()
	if PrebuiltDir() != "" {
		return ""
	}
	return testenv.RequireTool(tb, string(libc))
}

// CompileAt compiles src with cc and flags into out (test/vm builds the
// guests' fixtures with it).
func CompileAt(tb testing.TB, cc, out, src string, flags ...string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		tb.Fatal(err)
	}
	if !compile(tb, cc, out, src, flags) {
		tb.FailNow()
	}
}

// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"os"
	"path/filepath"
	"runtime"
)

// RepoRootEnv names the module's root for a test binary built with
// -trimpath (the VM guests'), whose source paths are not absolute.
const RepoRootEnv = "OTELCTX_REPO_ROOT"

// RepoRoot is the module's root (this file is internal/testutil/testenv/repo.go),
// found from the source path, so it holds wherever the test runs (a guest
// mounts the tree at the same path and, its binaries being trimmed, says
// where in RepoRootEnv).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	if !filepath.IsAbs(file) {
		if root := os.Getenv(RepoRootEnv); root != "" {
			return root
		}
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Testdata is a path under the top-level testdata/: what several packages
// share (the C and JavaScript publishers). Fuzz corpora stay with their
// packages.
func Testdata(elem ...string) string {
	return filepath.Join(append([]string{RepoRoot(), "testdata"}, elem...)...)
}

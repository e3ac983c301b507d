// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testenv

import (
	"os"
	"os/exec"
)

// GoBuild is `go build -trimpath ARGS...` run in dir, static (CGO_ENABLED=0):
// the configuration the collector builder builds the distribution with (the
// Makefile's GO_STATIC). Binaries tests build then share the build cache with
// the distribution and the image instead of compiling the standard library
// and the module once more. go test puts its own GOROOT/bin first on PATH, so
// this is the same toolchain. Add GOOS/GOARCH to Env to cross-compile.
func GoBuild(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("go", append([]string{"build", "-trimpath"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}

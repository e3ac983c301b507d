// SPDX-License-Identifier: Apache-2.0

// Package version is the version of otelctx's programs. The repository's
// VERSION file sets it: the Makefile passes it to the collector builder (the
// distribution's --version) and to go build with
//
//	-ldflags "-X github.com/otelctx/otelctx/internal/version.Version=$(cat VERSION)"
//
// (make cli). A build without that flag reports the module version Go
// recorded (go install …@vX.Y.Z), else "dev".
package version

import "runtime/debug"

// Version is set at link time from VERSION; empty in a plain go build.
var Version string

// String is the version to show: Version, else the main module's version
// from the build information, else "dev".
func String() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

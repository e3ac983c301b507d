// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testenv

import (
	"fmt"
	"os"
	"testing"
)

// DistEnv names the environment variable with the path of the built
// distribution (make build; make test and make e2e set it).
const DistEnv = "OTELCTX_DIST_BIN"

// DistBinary is the built distribution, or Missing when DistEnv does not
// name an executable.
func DistBinary(tb testing.TB) string {
	tb.Helper()
	bin := os.Getenv(DistEnv)
	if bin == "" {
		Missing(tb, DistEnv+" is not set (`make test` / `make e2e` build the distribution and set it)")
	}
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		Missing(tb, fmt.Sprintf("%s=%s is not an executable (build it with `make build`): %v", DistEnv, bin, err))
	}
	return bin
}

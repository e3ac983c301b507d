// SPDX-License-Identifier: Apache-2.0

//go:build linux

package scan_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// The tests start publisher processes whose output is read by goroutines
// (internal/testutil/testpub): none may outlive its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LongLived...) }

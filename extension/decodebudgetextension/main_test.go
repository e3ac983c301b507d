// SPDX-License-Identifier: Apache-2.0

//go:build linux

package decodebudgetextension

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.LongLived...)
}

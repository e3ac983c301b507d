// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package samplertest is the test guard of the eBPF sampler: tests that
// need it skip locally where it cannot load and fail under CI=true.
package samplertest

import (
	"errors"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
	"github.com/otelctx/otelctx/internal/threads/sampler"
)

// Require loads and closes a sampler once: not root, or a kernel without
// BPF, skips the test (fails it under CI=true, through testenv).
func Require(tb testing.TB) {
	tb.Helper()
	testenv.RequireRoot(tb)
	s, err := sampler.New(sampler.Options{})
	if err != nil {
		if errors.Is(err, sampler.ErrUnavailable) {
			testenv.Missing(tb, "the eBPF sampler cannot load: "+err.Error())
		}
		tb.Fatal(err)
	}
	_ = s.Close()
}

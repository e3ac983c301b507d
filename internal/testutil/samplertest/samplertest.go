// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package samplertest is the test guard of the eBPF sampler: tests that
// need it skip locally where it cannot load and fail under CI=true.
package samplertest

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

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

// UnitCapabilities are the capabilities deploy/systemd/otelctx.service
// grants (AmbientCapabilities), by number: the tests that follow a profiler
// with only these hold the unit to what every follow method needs, and
// test/deploy holds this list to the unit.
var UnitCapabilities = map[string]uintptr{
	"CAP_SYS_PTRACE": unix.CAP_SYS_PTRACE, "CAP_BPF": unix.CAP_BPF, "CAP_PERFMON": unix.CAP_PERFMON,
	"CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN, "CAP_SYSLOG": unix.CAP_SYSLOG, "CAP_DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH,
}

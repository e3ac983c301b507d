// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/version"
)

func TestVersionFlag(t *testing.T) {
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	version.Version = "1.2.3-test"
	for _, arg := range []string{"--version", "-version"} {
		var out, errOut bytes.Buffer
		if code := run([]string{arg}, &out, &errOut); code != exitOK {
			t.Fatalf("%s: exit %d, stderr %q", arg, code, errOut.String())
		}
		if got := strings.TrimSpace(out.String()); got != "otelctx version 1.2.3-test" {
			t.Errorf("%s: got %q", arg, got)
		}
	}
	var out, errOut bytes.Buffer
	run([]string{"--help"}, &out, &errOut)
	if !strings.Contains(out.String(), "otelctx --version") {
		t.Errorf("usage does not mention --version:\n%s", out.String())
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// TestAlertRules: deploy/prometheus/otelctx-alerts.yaml is a valid rule
// file (promtool check rules: syntax, PromQL, templates), and its unit
// tests pass (promtool test rules): each alert fires on the series meant to
// fire it, with the labels and annotations written there, and not on a
// healthy collector's.
func TestAlertRules(t *testing.T) {
	promtool := testenv.RequireTool(t, "promtool")
	dir := filepath.Join(repoRoot(t), "deploy", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "otelctx-alerts.yaml"},
		{"test", "rules", "otelctx-alerts.test.yaml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

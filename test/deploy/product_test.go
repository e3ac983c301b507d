// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

func readVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(b))
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		t.Fatalf("VERSION %q is not a semantic version", v)
	}
	return v
}

// TestDistVersion: the distribution reports the version in VERSION.
func TestDistVersion(t *testing.T) {
	want := readVersion(t)
	out, err := exec.Command(testenv.DistBinary(t), "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "otelcol-otelctx version "+want {
		t.Errorf("otelcol-otelctx --version = %q, want version %s (VERSION)", got, want)
	}
}

// TestChangelogHasVersion: CHANGELOG.md has a section for VERSION.
func TestChangelogHasVersion(t *testing.T) {
	v := readVersion(t)
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^## \[?` + regexp.QuoteMeta(v) + `\]?`).Match(b) {
		t.Errorf("CHANGELOG.md has no \"## %s\" section", v)
	}
}

// TestMakeHelpListsEveryTarget: `make help` names every target of the
// Makefile.
func TestMakeHelpListsEveryTarget(t *testing.T) {
	mk := testenv.RequireTool(t, "make")
	root := repoRoot(t)
	src, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(src), -1) {
		targets[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`(?m)^\.PHONY:(.*)$`).FindAllStringSubmatch(string(src), -1) {
		for _, n := range strings.Fields(m[1]) {
			targets[n] = true
		}
	}
	cmd := exec.Command(mk, "--no-print-directory", "-s", "help")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	listed := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(l, "  ") {
			listed[f[0]] = true
		}
	}
	var missing []string
	for n := range targets {
		if !listed[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("make help does not list %v:\n%s", missing, out)
	}
}

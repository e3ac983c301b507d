// SPDX-License-Identifier: Apache-2.0

//go:build linux

package vm

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestNotRun(t *testing.T) {
	rs := []*TestResult{{Name: "TestA"}}
	for _, c := range []struct {
		g    guestTest
		want string
	}{
		{guestTest{run: "^(TestA|TestB)$"}, "TestB"},
		{guestTest{run: "^(TestA|TestB)$", skip: "^TestB$"}, ""},
		{guestTest{run: "^TestC$"}, "TestC"},
		{guestTest{run: "."}, ""},
		{guestTest{run: "^TestEnrichFollowing$/^followed/"}, ""},
	} {
		if got := strings.Join(notRun(c.g, rs), ","); got != c.want {
			t.Errorf("notRun(%+v) = %q, want %q", c.g, got, c.want)
		}
	}
	// A failed test stops go test before its benchmarks: not a rename.
	g := guestTest{run: "^TestA$", bench: "^BenchmarkA$"}
	if got := notRun(g, rs); len(got) != 1 || got[0] != "BenchmarkA" {
		t.Errorf("benchmark after passing tests: notRun = %v, want [BenchmarkA]", got)
	}
	if got := notRun(g, []*TestResult{{Name: "TestA", Action: "fail"}}); len(got) != 0 {
		t.Errorf("benchmark after a failed test: notRun = %v, want none", got)
	}
}

// TestGuestPlanNamesExist: every test the guest plans name (default and
// OTELCTX_VM_FULL) is a test function of its package, checked on the host
// without booting.
func TestGuestPlanNamesExist(t *testing.T) {
	for _, full := range []string{"", "1"} {
		t.Setenv(FullEnv, full)
		for _, g := range allGuestTests() {
			for _, pat := range []string{g.run, g.skip} {
				m := planNames.FindStringSubmatch(pat)
				if m == nil {
					continue
				}
				src := testSources(t, filepath.Join(RepoRoot(), g.pkg))
				for _, name := range strings.Split(m[1], "|") {
					if !regexp.MustCompile(`(?m)^func ` + name + `\(t \*testing\.T\)`).MatchString(src) {
						t.Errorf("%s (%s): no test %s in %s", g.name, pat, name, g.pkg)
					}
				}
			}
		}
	}
}

func testSources(t *testing.T, dir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in %s: %v", dir, err)
	}
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

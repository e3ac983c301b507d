// SPDX-License-Identifier: Apache-2.0

package codesize

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// MaxTrackedBytes is the largest file git may track outside a fixture
// directory: a bigger one is a build output committed by mistake (an
// 11 MB `go build ./test/profilere2e` binary sat at the root once).
const MaxTrackedBytes = 1 << 20

// isFixture reports whether a tracked path is test input: a file under a
// testdata directory (a fuzz corpus, a recorded ELF).
func isFixture(path string) bool {
	return strings.HasPrefix(path, "testdata/") || strings.Contains(path, "/testdata/")
}

// TestNoLargeTrackedFiles: no file git tracks is over MaxTrackedBytes
// unless it is a fixture.
func TestNoLargeTrackedFiles(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed to list the tracked files: %v", err)
	}
	cmd := exec.Command("git", "-C", root, "ls-files", "-z")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v", root, err)
	}
	n := 0
	for _, rel := range bytes.Split(bytes.TrimSuffix(out, []byte{0}), []byte{0}) {
		path := string(rel)
		fi, err := os.Lstat(filepath.Join(root, path))
		if err != nil {
			// Deleted in the work tree and not yet committed: not tracked
			// content any more.
			continue
		}
		n++
		if fi.Mode().IsRegular() && fi.Size() > MaxTrackedBytes && !isFixture(path) {
			t.Errorf("%s: %d bytes tracked (over %d and not under a testdata directory): a build output? git rm it and add it to .gitignore", path, fi.Size(), MaxTrackedBytes)
		}
	}
	if n < 100 {
		t.Fatalf("only %d tracked files under %s", n, root)
	}
}

func TestIsFixture(t *testing.T) {
	for path, want := range map[string]bool{
		"testdata/publishers/threadpub.c":                      true,
		"internal/threads/tlsvar/testdata/fuzz/FuzzParseELF/x": true,
		"profilere2e":              false,
		"test/profilere2e/main.go": false,
		"internal/threads/sampler/sampler_x86_bpfel.o": false,
		"internal/mytestdata/x":                        false,
	} {
		if got := isFixture(path); got != want {
			t.Errorf("isFixture(%q) = %v, want %v", path, got, want)
		}
	}
}

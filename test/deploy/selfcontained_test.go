// SPDX-License-Identifier: Apache-2.0

//go:build linux

package deploy

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoReferencesOutsideRepository: no file of the repository points at
// documents or paths outside it (the formats are in docs/). This file is
// the only one allowed to name them.
func TestNoReferencesOutsideRepository(t *testing.T) {
	root := repoRoot(t)
	self, err := filepath.Abs("selfcontained_test.go")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"FORMATS" + ".md", "../" + "shared", "/work" + "/"}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "_build") {
				return filepath.SkipDir
			}
			return nil
		}
		// .git is a file in a git worktree (its gitdir's path).
		if !d.Type().IsRegular() || path == self || rel == ".git" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b, 0) >= 0 { // binary (BPF objects, test data)
			return nil
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, f := range forbidden {
				if strings.Contains(line, f) {
					t.Errorf("%s:%d: refers to %q, outside the repository: %s", rel, i+1, f, strings.TrimSpace(line))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDocsLinksResolve: every relative link of docs/*.md names a file of
// the repository.
func TestDocsLinksResolve(t *testing.T) {
	root := repoRoot(t)
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if len(pages) < 8 {
		t.Fatalf("docs/ has %d pages, want the formats, requirements, deploy, troubleshooting and compatibility pages", len(pages))
	}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		for {
			i := strings.Index(s, "](")
			if i < 0 {
				break
			}
			s = s[i+2:]
			j := strings.IndexByte(s, ')')
			if j < 0 {
				break
			}
			link := s[:j]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "#") {
				continue
			}
			link, _, _ = strings.Cut(link, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), link)); err != nil {
				t.Errorf("%s: link %s: %v", filepath.Base(p), link, err)
			}
		}
	}
}

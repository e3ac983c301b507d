// SPDX-License-Identifier: Apache-2.0

package codesize

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// skipAllowed is the one package that skips tests: testenv skips locally
// and fails under CI=true, where a skipped test would be a hidden failure.
const skipAllowed = "internal/testutil/testenv"

// skipMethods are testing.TB's ways to skip.
var skipMethods = map[string]bool{"Skip": true, "Skipf": true, "SkipNow": true}

// TestSkipsGoThroughTestenv: no Go file outside skipAllowed calls Skip,
// Skipf or SkipNow (on a *testing.T, B, F or TB: any receiver).
func TestSkipsGoThroughTestenv(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	found := skipCalls(t, root)
	for _, f := range found {
		t.Errorf("%s: a direct skip; use testenv (testenv.Missing, testenv.Require*), which fails under CI=true", f)
	}
}

// skipCalls lists file:line of every skip call under root outside
// skipAllowed.
func skipCalls(t *testing.T, root string) []string {
	t.Helper()
	var found []string
	files := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, "_") || strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") ||
				rel == skipAllowed {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		files++
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && skipMethods[sel.Sel.Name] {
				pos := fset.Position(call.Pos())
				found = append(found, rel+":"+strconv.Itoa(pos.Line))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("only %d Go files found under %s", files, root)
	}
	return found
}

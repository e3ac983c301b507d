// SPDX-License-Identifier: Apache-2.0

package codesize

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// allowlist: what may exceed the limits, and why. A key is a file
// ("dir/file.go": its length and its functions), a function
// ("dir/file.go:Func", "dir/file.go:Type.Method"), or a pattern with '*'
// (path.Match on the file) for code being rewritten.
var allowlist = map[string]string{
	// Measurement programs under test/ (not part of the distribution),
	// written as one sequence of steps sharing their cleanup; not split yet.
	"test/profilere2e/main.go":             "make e2e-profiler's driver: flags, builds and one run per frequency in sequence; not split yet",
	"test/profilere2e/score.go:score":      "scores each profiler sample against the ground truth in one pass over the events; not split yet",
	"test/enrich/demoprofiles/main.go:run": "make demo-profiles: samples /proc and builds one OTLP profile in one pass; not split yet",
	// mdatagen's shape, written by hand until mdatagen generates it (then
	// it is exempt as generated code).
	"internal/processctxtel/generated_telemetry.go:NewTelemetryBuilder": "the process_ctx extension's TelemetryBuilder in mdatagen's shape: one registration per instrument of metadata.yaml (31), in one function as mdatagen writes it",
}

// violation is one file or function over its limit.
type violation struct {
	key   string // as in allowlist: "file" or "file:Func"
	file  string
	lines int
	limit int
}

func (v violation) String() string {
	return fmt.Sprintf("%s: %d lines (limit %d)", v.key, v.lines, v.limit)
}

func TestSizes(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not at %s: %v", root, err)
	}
	vs, err := scanTree(root)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, v := range vs {
		if k, ok := allowed(v); ok {
			used[k] = true
			t.Logf("allowed: %s (%s)", v, allowlist[k])
			continue
		}
		t.Errorf("%s: split it, or add it to the allowlist with the reason", v)
	}
	for _, k := range slices.Sorted(maps.Keys(allowlist)) {
		if used[k] {
			continue
		}
		if strings.Contains(k, "*") {
			t.Logf("allowlist pattern %q matches nothing over the limits now", k)
			continue
		}
		t.Errorf("allowlist entry %q matches nothing over the limits: remove it", k)
	}
}

// allowed returns the allowlist key that covers v.
func allowed(v violation) (string, bool) {
	if _, ok := allowlist[v.key]; ok {
		return v.key, true
	}
	if _, ok := allowlist[v.file]; ok {
		return v.file, true
	}
	for k := range allowlist {
		if ok, _ := path.Match(k, v.file); ok && strings.Contains(k, "*") {
			return k, true
		}
	}
	return "", false
}

// scanTree checks every .go file under root that the go tool builds (it
// ignores directories starting with '_' or '.', and testdata), except tests
// and generated files.
func scanTree(root string) ([]violation, error) {
	var vs []violation
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, "_") || strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		fvs, err := checkFile(filepath.ToSlash(rel), src)
		vs = append(vs, fvs...)
		return err
	})
	return vs, err
}

// checkFile returns the limits file (named rel) exceeds; nothing for a
// generated file.
func checkFile(rel string, src []byte) ([]violation, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) {
		return nil, nil
	}
	var vs []violation
	if n := fset.File(f.Pos()).LineCount(); n > MaxFileLines {
		vs = append(vs, violation{key: rel, file: rel, lines: n, limit: MaxFileLines})
	}
	span := func(n ast.Node) int { return fset.Position(n.End()).Line - fset.Position(n.Pos()).Line + 1 }
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok {
			if n := span(fd); n > MaxFuncLines {
				vs = append(vs, violation{key: rel + ":" + funcName(fd), file: rel, lines: n, limit: MaxFuncLines})
			}
			continue
		}
		// Function literals at package level (var f = func...).
		ast.Inspect(d, func(n ast.Node) bool {
			fl, ok := n.(*ast.FuncLit)
			if !ok {
				return true
			}
			if l := span(fl); l > MaxFuncLines {
				pos := fset.Position(fl.Pos())
				vs = append(vs, violation{key: fmt.Sprintf("%s:func literal at line %d", rel, pos.Line), file: rel, lines: l, limit: MaxFuncLines})
			}
			return false
		})
	}
	return vs, nil
}

// funcName is Func or Type.Method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fd.Name.Name
		}
		return fd.Name.Name
	}
}

// TestCheckFile: the limits are exclusive of the limit itself, methods are
// named with their type, and generated files are skipped.
func TestCheckFile(t *testing.T) {
	body := func(lines int) string { // a function of exactly lines lines
		return "{\n" + strings.Repeat("\t_ = 0\n", lines-2) + "}\n"
	}
	src := "package p\n\ntype T struct{}\n\nfunc ok() " + body(MaxFuncLines) +
		"func (t *T) long() " + body(MaxFuncLines+1) +
		"var f = func() " + body(MaxFuncLines+1)
	vs, err := checkFile("p/p.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, v := range vs {
		keys = append(keys, v.key)
	}
	want := []string{"p/p.go:T.long", "p/p.go:func literal at line 166"}
	if !slices.Equal(keys, want) {
		t.Errorf("violations %q, want %q", keys, want)
	}

	big := "package p\n" + strings.Repeat("\n", MaxFileLines)
	if vs, _ := checkFile("p/big.go", []byte(big)); len(vs) != 1 || vs[0].key != "p/big.go" {
		t.Errorf("a %d-line file: violations %v, want the file", MaxFileLines+1, vs)
	}
	gen := "// Code generated by x. DO NOT EDIT.\n\n" + big
	if vs, _ := checkFile("p/gen.go", []byte(gen)); len(vs) != 0 {
		t.Errorf("generated file: violations %v, want none", vs)
	}
}

// SPDX-License-Identifier: Apache-2.0

// Package fuzzcorpus keeps a package's committed seed corpus
// (testdata/fuzz/<FuzzTarget>/<name>, Go's corpus file format) in step with
// the seeds its tests generate.
package fuzzcorpus

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update-corpus", false, "rewrite the seed corpus under testdata/fuzz")

// Seeds maps a fuzz target to named entries, each the target's arguments.
type Seeds map[string]map[string][]any

// File renders values in Go's fuzz corpus file format.
func File(args ...any) []byte {
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(v)))
		case string:
			fmt.Fprintf(&b, "string(%s)\n", strconv.Quote(v))
		case uint16:
			fmt.Fprintf(&b, "uint16(%d)\n", v)
		case uint32:
			fmt.Fprintf(&b, "uint32(%d)\n", v)
		case uint64:
			fmt.Fprintf(&b, "uint64(%d)\n", v)
		default:
			panic(fmt.Sprintf("fuzzcorpus: no corpus encoding for %T", a))
		}
	}
	return []byte(b.String())
}

// Check fails t for every committed seed file that is missing or differs
// from seeds; with -update-corpus it rewrites them instead. pkg names the
// package in the hint of how to regenerate.
func Check(t *testing.T, pkg string, seeds Seeds) {
	t.Helper()
	for target, entries := range seeds {
		dir := filepath.Join("testdata", "fuzz", target)
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for name, args := range entries {
			path := filepath.Join(dir, name)
			want := File(args...)
			if *update {
				if err := os.WriteFile(path, want, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s is missing or stale (err %v): run go test -run TestSeedCorpus -update-corpus %s", path, err, pkg)
			}
		}
	}
}

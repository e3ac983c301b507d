// SPDX-License-Identifier: Apache-2.0

//go:build linux

package remote

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// rawReaders are the only non-test files that may read another process's
// memory without safemem, and why each read there cannot block.
var rawReaders = map[string]string{
	"internal/proc/remote/remote.go":    "the reader itself: its system call runs in the reader helper only",
	"internal/proc/remote/readv.go":     "the reader itself: its system calls run in the reader helper only",
	"internal/proc/safemem/safemem.go":  "reads only after its check",
	"internal/proc/safemem/readeach.go": "reads only the ranges its checks accept",
	// The pattern /mem" matches its import of gRPC's buffers package.
	"extension/decodebudgetextension/codec.go": "imports google.golang.org/grpc/mem; reads no process's memory",
}

// TestNoRawReads: every read at an address a publisher chose goes through
// safemem: a new raw use of
// remote.Memory, or a process_vm_readv of its own, fails here until it is
// made safe and listed above.
func TestNoRawReads(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found from %s: %v", file, err)
	}
	patterns := [][]byte{[]byte("remote.Memory"), []byte("PROCESS_VM_READV"), []byte("ProcessVMReadv"), []byte(`/mem"`)}
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		for _, p := range patterns {
			if bytes.Contains(b, p) {
				found++
				if _, ok := rawReaders[rel]; !ok {
					t.Errorf("%s uses %s: read another process's memory through safemem (or list it in rawReaders with the reason its reads cannot block)", rel, p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no use of remote.Memory found at all: the walk is broken")
	}
}

// TestRawReadsOnlyInTheHelper: the system calls (rawReadAtErrno,
// rawReadEachErrno) are made only by the reader helper (helper_serve.go),
// so that no thread of this program waits on another process's page.
func TestRawReadsOnlyInTheHelper(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Dir(file)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || name == "helper_serve.go" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, call := range []string{"rawReadAtErrno(", "rawReadEachErrno("} {
			n := bytes.Count(b, []byte(call)) - bytes.Count(b, []byte("func "+call))
			if n > 0 {
				t.Errorf("%s calls %s outside the reader helper (helper_serve.go)", name, call)
			}
		}
	}
}

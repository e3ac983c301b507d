// SPDX-License-Identifier: Apache-2.0

// Package fakeproc lays out pieces of a /proc tree in a directory, for
// tests of readers that take a proc root.
package fakeproc

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Tasks makes root/pid/task list tids, as /proc does (ptrace.ListThreads
// reads only the names), the process in the reader's PID namespace (its
// ns/pid the same file as self's, so its TIDs are taken as listed); no
// tids removes the process.
func Tasks(tb testing.TB, root string, pid int, tids ...int) {
	tb.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.RemoveAll(dir); err != nil {
		tb.Fatal(err)
	}
	if len(tids) == 0 {
		return
	}
	self := filepath.Join(root, "self", "ns", "pid")
	for _, d := range []string{filepath.Dir(self), filepath.Join(dir, "ns")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.WriteFile(self, nil, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(dir, "ns", "pid")); err != nil {
		tb.Fatal(err)
	}
	for _, tid := range tids {
		if err := os.MkdirAll(filepath.Join(dir, "task", strconv.Itoa(tid)), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
}

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
// reads only the names); no tids removes the process.
func Tasks(tb testing.TB, root string, pid int, tids ...int) {
	tb.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.RemoveAll(dir); err != nil {
		tb.Fatal(err)
	}
	for _, tid := range tids {
		if err := os.MkdirAll(filepath.Join(dir, "task", strconv.Itoa(tid)), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
}

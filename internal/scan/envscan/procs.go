// SPDX-License-Identifier: Apache-2.0

//go:build linux

package envscan

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PIDs lists the process directories of procRoot (nil: unreadable): the
// processes whose environment may name them.
func PIDs(procRoot string) []int {
	f, err := os.Open(procRoot)
	if err != nil {
		return nil
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil
	}
	out := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// ExecutableName is the base name of procRoot/PID/exe, or "".
func ExecutableName(procRoot string, pid int) string {
	target, err := os.Readlink(filepath.Join(procRoot, strconv.Itoa(pid), "exe"))
	if err != nil {
		return ""
	}
	return filepath.Base(strings.TrimSuffix(target, " (deleted)"))
}

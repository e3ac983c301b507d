// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ContainerCgroups makes, on the cgroup v2 hierarchy (/sys/fs/cgroup, or
// /sys/fs/cgroup/unified beside v1 controllers; no controller needed), a
// cgroup of the test's and below it one per element of paths (e.g.
// "docker-ID.scope", or "docker-A.scope/docker-B.scope" nested), as a
// container runtime names them. It returns for each a SysProcAttr that
// starts a process in it (CLONE_INTO_CGROUP). The cgroups are removed when
// the test ends, once their processes are gone. Needs root.
func ContainerCgroups(tb testing.TB, paths ...string) []*syscall.SysProcAttr {
	tb.Helper()
	RequireRoot(tb)
	var root string
	for _, r := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(r, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			root = r
			break
		}
	}
	if root == "" {
		Missing(tb, "no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
	}
	base := filepath.Join(root, "otelctx-test-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	var made []string
	mkdir := func(dir string) {
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			Missing(tb, "cannot make a cgroup ("+err.Error()+")")
		} else if err == nil {
			made = append(made, dir)
		}
	}
	mkdir(base)
	tb.Cleanup(func() {
		for i := len(made) - 1; i >= 0; i-- {
			dir := made[i]
			EventuallyWithin(tb, 2*time.Minute, "the cgroup's processes gone", func() bool {
				b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
				return err != nil || len(bytes.TrimSpace(b)) == 0
			})
			if err := os.Remove(dir); err != nil {
				tb.Errorf("removing a test cgroup: %v", err)
			}
		}
	})
	attrs := make([]*syscall.SysProcAttr, len(paths))
	for i, p := range paths {
		dir := base
		for _, part := range splitSlash(p) {
			dir = filepath.Join(dir, part)
			mkdir(dir)
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { unix.Close(fd) })
		attrs[i] = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	return attrs
}

func splitSlash(p string) []string {
	var out []string
	for _, e := range bytes.Split([]byte(p), []byte{'/'}) {
		if len(e) > 0 {
			out = append(out, string(e))
		}
	}
	return out
}

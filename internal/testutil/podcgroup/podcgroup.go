// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package podcgroup puts a test's real process in a cgroup whose path names
// a Kubernetes pod and container, as the kubelet's cgroupfs driver lays
// them out.
package podcgroup

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// Enter moves pid into a new cgroup
// <v1 pids hierarchy>/kubepods/otelctx-test-<id>/pod<uid>/<cid> (random ids,
// the test's level in place of a QoS class: pod UIDs are read only below the
// kubelet's root) and removes what it created when the test ends.
func Enter(t testing.TB, pid int) (cid, uid string) {
	t.Helper()
	root := "/sys/fs/cgroup/pids"
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		testenv.Missing(t, "no cgroup v1 pids hierarchy at "+root+" to put a publisher in a container's cgroup")
	}
	b := make([]byte, 48)
	_, _ = rand.Read(b)
	cid = fmt.Sprintf("%x", b[:32])
	u := fmt.Sprintf("%x", b[32:])
	uid = u[:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:]
	kubepods := filepath.Join(root, "kubepods")
	_, err := os.Stat(kubepods)
	keep := root // a kubepods cgroup that was there stays
	if err == nil {
		keep = kubepods
	}
	dir := filepath.Join(kubepods, "otelctx-test-"+cid[:8], "pod"+uid, cid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		testenv.Missing(t, "cannot create a cgroup (root needed): "+err.Error())
	}
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
		for d := dir; d != keep; d = filepath.Dir(d) {
			_ = os.Remove(d)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("move %d into %s: %v", pid, dir, err)
	}
	return cid, uid
}

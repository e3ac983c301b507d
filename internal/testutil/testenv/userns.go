// SPDX-License-Identifier: Apache-2.0

//go:build linux

package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

// MintingNamespace starts a process as host UID creator that makes a user
// namespace (unshare --user), and maps its UIDs and GIDs 0..n-1 to
// base..base+n-1 as root, as newuidmap does for a subordinate UID range
// (rootless Podman). It returns the namespace's /proc/PID/ns/user, which
// EnterArgs joins; the process is killed when the test ends. Needs root.
func MintingNamespace(tb testing.TB, creator, base, n int) string {
	tb.Helper()
	RequireRoot(tb)
	sleep := RequireTool(tb, "sleep")
	cmd := exec.Command(RequireTool(tb, "unshare"), "--user", sleep, "3600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(creator), Gid: uint32(creator)}}
	if err := cmd.Start(); err != nil {
		Missing(tb, "cannot start unshare as UID "+strconv.Itoa(creator)+" ("+err.Error()+")")
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	dir := "/proc/" + strconv.Itoa(cmd.Process.Pid)
	Eventually(tb, "unshare made its namespace and exec'd sleep", func() bool {
		exe, err := os.Readlink(dir + "/exe")
		return err == nil && exe == sleep
	})
	m := fmt.Sprintf("0 %d %d\n", base, n)
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(dir+"/"+f, []byte(m), 0); err != nil {
			Missing(tb, "cannot map UIDs into a user namespace ("+err.Error()+")")
		}
	}
	return dir + "/ns/user"
}

// EnterArgs is the command line that runs argv in the user namespace ns
// (MintingNamespace) as its UID and GID uid.
func EnterArgs(tb testing.TB, ns string, uid int, argv ...string) []string {
	tb.Helper()
	id := strconv.Itoa(uid)
	return append([]string{RequireTool(tb, "nsenter"), "--user=" + ns, "--setuid=" + id, "--setgid=" + id, "--"}, argv...)
}

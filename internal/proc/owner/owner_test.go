// SPDX-License-Identifier: Apache-2.0

//go:build linux

package owner

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/proc/procstat"
	"github.com/otelctx/otelctx/internal/testutil/testenv"
)

// sleeper starts sleep with attr, killed and reaped when the test ends.
func sleeper(t *testing.T, attr *syscall.SysProcAttr) int {
	t.Helper()
	cmd := exec.Command(testenv.RequireTool(t, "sleep"), "3600")
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		testenv.Missing(t, "cannot start a process in a new user namespace ("+err.Error()+")")
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}

// TestOf: a process of the host's user namespace is charged to its real
// UID; processes in a namespace nobody made, under the UIDs it maps (host
// UIDs 300000-300002), to nobody; one in a namespace root (the test) made,
// as host UID 200007, to that namespace (a runtime's: one per container),
// another such namespace to another key; one in a namespace made inside
// the latter (by unshare, as UID 5 there), to its outermost namespace's.
func TestOf(t *testing.T) {
	testenv.RequireRoot(t)
	host := sleeper(t, &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}})
	if id := containerOf("/proc", host); id != "" {
		// The test runs in a container: what it starts is the container's.
		if got := Of("/proc", host, 65534); got != containerKey(id) {
			t.Errorf("nobody's process in this test's container charged to %d, want the container's %d", got, containerKey(id))
		}
		return
	}
	if got := Of("/proc", host, procstat.RealUID("/proc", host)); got != 65534 {
		t.Errorf("host process of nobody charged to %d, want 65534", got)
	}

	ns := testenv.MintingNamespace(t, 65534, 300000, 3)
	for uid := range 3 {
		argv := testenv.EnterArgs(t, ns, uid, testenv.RequireTool(t, "sleep"), "3600")
		cmd := exec.Command(argv[0], argv[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		pid := cmd.Process.Pid
		testenv.Eventually(t, "nsenter entered the namespace as its UID", func() bool {
			return procstat.RealUID("/proc", pid) == 300000+uid
		})
		if got := Of("/proc", pid, 300000+uid); got != 65534 {
			t.Errorf("host UID %d in nobody's namespace charged to %d, want 65534 (the namespace's creator)", 300000+uid, got)
		}
	}

	rootNS := func(hostID int) int {
		pid := sleeper(t, &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostID, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostID, Size: 1}},
			Credential:  &syscall.Credential{Uid: 0, Gid: 0},
		})
		testenv.Eventually(t, "the namespaced process's UID mapped", func() bool {
			return procstat.RealUID("/proc", pid) == hostID
		})
		return pid
	}
	a, b := rootNS(200007), rootNS(200008)
	ka, kb := Of("/proc", a, 200007), Of("/proc", b, 200008)
	if ka > Unknown-1 || kb > Unknown-1 || ka == kb {
		t.Errorf("processes in two namespaces root made charged to %d and %d, want two distinct namespace keys (below %d)", ka, kb, Unknown)
	}

	unshare := testenv.RequireTool(t, "unshare")
	cmd := exec.Command(unshare, "--user", testenv.RequireTool(t, "sleep"), "3600")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 400000, Size: 65536}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 400000, Size: 65536}},
		Credential:  &syscall.Credential{Uid: 5, Gid: 5},
	}
	if err := cmd.Start(); err != nil {
		testenv.Missing(t, "cannot start unshare in a user namespace ("+err.Error()+")")
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	nested := cmd.Process.Pid
	sleep, _ := os.Readlink("/proc/" + strconv.Itoa(a) + "/exe")
	testenv.Eventually(t, "unshare made its namespace and exec'd sleep", func() bool {
		exe, err := os.Readlink("/proc/" + strconv.Itoa(nested) + "/exe")
		return err == nil && exe == sleep
	})
	// The outer namespace is the one Go made for unshare before its exec:
	// charged as any process in it would be, whatever the nested one.
	outer := outerKey(t, nested)
	if got, want := Of("/proc", nested, procstat.RealUID("/proc", nested)), outer; got != want || got > Unknown-1 {
		t.Errorf("process two namespaces down charged to %d, want %d (its outermost namespace's key)", got, want)
	}
	if got := Of("/proc", 1<<30, 7); got != 7 {
		t.Errorf("a PID that does not exist charged to %d, want its UID 7", got)
	}
}

// outerKey is the key of the namespace above pid's (here the outermost
// below the host's), read as Of would, through NS_GET_PARENT.
func outerKey(t *testing.T, pid int) int {
	t.Helper()
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	parent, err := ioctlFd(fd, nsGetParent)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(parent)
	var st unix.Stat_t
	if err := unix.Fstat(parent, &st); err != nil {
		t.Fatal(err)
	}
	return namespaceKey(st.Ino)
}

// TestContainers: the processes in two containers' cgroups are two
// shares, whatever their UIDs (root, nobody, 70001: root in a container
// without a user namespace can take any); one in a cgroup that container A
// made below its own (named as container C) is A's; root on the host is
// UID 0; nobody's process in a cgroup named as a container below nobody's
// systemd manager (a delegated subtree: nobody named it) is nobody's.
// Before: by real UID, root's in both containers were one share.
func TestContainers(t *testing.T) {
	const (
		a = "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a"
		b = "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b"
		c = "0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c"
		d = "0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d"
	)
	attrs := testenv.ContainerCgroups(t, "docker-"+a+".scope", "docker-"+b+".scope", "docker-"+a+".scope/docker-"+c+".scope",
		"user.slice/user-65534.slice/user@65534.service/docker-"+d+".scope")
	as := func(attr *syscall.SysProcAttr, uid int) *syscall.SysProcAttr {
		cp := *attr
		cp.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
		return &cp
	}
	inA, inB, inAC := sleeper(t, attrs[0]), sleeper(t, attrs[1]), sleeper(t, attrs[2])
	nobodyInA, uidInA := sleeper(t, as(attrs[0], 65534)), sleeper(t, as(attrs[0], 70001))
	delegated := sleeper(t, as(attrs[3], 65534))
	host := sleeper(t, nil)
	ka, kb := Of("/proc", inA, 0), Of("/proc", inB, 0)
	if ka >= namespaceKey(1<<62-1) || kb >= namespaceKey(1<<62-1) || ka == kb {
		t.Errorf("root in containers A and B charged to %d and %d, want two distinct container keys (below every namespace key)", ka, kb)
	}
	for name, got := range map[string]int{
		"root in a cgroup A made below its own (named C)": Of("/proc", inAC, 0),
		"nobody in A":    Of("/proc", nobodyInA, 65534),
		"UID 70001 in A": Of("/proc", uidInA, 70001),
	} {
		if got != ka {
			t.Errorf("%s charged to %d, want A's %d", name, got, ka)
		}
	}
	if got := Of("/proc", host, 0); got != 0 {
		t.Errorf("root on the host charged to %d, want 0", got)
	}
	if got := Of("/proc", delegated, 65534); got != 65534 {
		t.Errorf("nobody in a container-named cgroup of its own delegated subtree charged to %d, want 65534", got)
	}
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package owner names the share a process's costs are charged to, one
// that neither the process nor its user can multiply, the first that
// applies:
//
//  1. its container: the outermost container element of its cgroup path
//     (internal/hostinfo), whatever its UIDs and user namespaces (root in
//     a container without a user namespace, as with hostPID, can take any
//     UID), unless that cgroup is in a subtree systemd delegated to a user
//     (below a user@UID.service), where the user names its cgroups;
//  2. in a user namespace below this program's: the UID that created the
//     outermost such namespace (rootless containers, unshare -U: every UID
//     a subordinate range maps is one user), or, when root created it
//     outside any container, that namespace;
//  3. its real UID.
//
// Residual: a system service that root gave Delegate=yes may name cgroups
// after containers and so make shares, as the runtime does.
package owner

import (
	"hash/fnv"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/otelctx/otelctx/internal/hostinfo"
)

// The nsfs ioctls (linux/nsfs.h): _IO(0xb7, 2) and _IO(0xb7, 4).
const (
	nsGetParent   = 0xb702
	nsGetOwnerUID = 0xb704
)

// maxDepth bounds the walk up the user namespaces: the kernel nests them
// at most 32 deep.
const maxDepth = 33

// Unknown is the owner of a process whose namespace cannot be read (it
// exited, or /proc is not the host's): its costs are charged together.
const Unknown = -1

// namespaceKey is the owner of the processes in a user namespace root
// made: a negative number (UIDs are not), distinct per namespace inode.
func namespaceKey(ino uint64) int { return -2 - int(ino&(1<<62-1)) }

// containerKey is the owner of root's processes in a container: a
// negative number below every namespaceKey, distinct per container id.
func containerKey(id string) int {
	h := fnv.New64a()
	h.Write([]byte(id))
	return -(1 << 62) - 2 - int(h.Sum64()&(1<<61-1))
}

// Of is the owner charged for pid, whose real UID is uid (-1:
// unreadable): a host UID as seen from this program's user namespace (the
// host's in the DaemonSet), or a negative key naming a container or a user
// namespace root made. procRoot is "/proc" (another root: a test's tree,
// whose PIDs are not this host's, and uid is returned).
func Of(procRoot string, pid, uid int) int {
	if procRoot != "/proc" {
		return uid
	}
	if id := containerOf(procRoot, pid); id != "" {
		return containerKey(id)
	}
	creator, ns, below := outermost(pid)
	switch {
	case !below:
		return uid
	case creator == 0:
		return namespaceKey(ns)
	}
	return creator // or Unknown
}

// maxCgroupFile bounds the read of /proc/PID/cgroup (as internal/hostinfo).
const maxCgroupFile = 16 << 10

// containerOf is the container of pid's cgroup path ("": none, or one in
// a user's delegated subtree on some line).
func containerOf(procRoot string, pid int) string {
	f, err := os.Open(procRoot + "/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, maxCgroupFile)
	n, _ := f.Read(b)
	id := ""
	for line := range strings.Lines(string(b[:n])) {
		c := hostinfo.ParseCgroup([]byte(line)).ContainerID
		if c == "" {
			continue
		}
		if userDelegated(line[:strings.Index(line, c)]) {
			return ""
		}
		id = c
	}
	return id
}

// userDelegated reports whether a cgroup path (up to its container
// element) is below a user's systemd manager (user@UID.service), whose
// subtree the user controls.
func userDelegated(path string) bool {
	for _, e := range strings.Split(path, "/") {
		if strings.HasPrefix(e, "user@") && strings.HasSuffix(e, ".service") {
			return true
		}
	}
	return false
}

// outermost finds pid's outermost user namespace below this program's:
// below is false when pid is in this program's (or it cannot be told:
// the process exited), else creator is the UID that made that namespace
// (Unknown: unreadable) and ns its inode.
func outermost(pid int) (creator int, ns uint64, below bool) {
	self, ok := selfNS()
	if !ok {
		return 0, 0, false
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, false
	}
	for range maxDepth {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			break
		}
		if st.Ino == self.Ino && st.Dev == self.Dev {
			unix.Close(fd)
			return 0, 0, false // this program's namespace: the real UID is a host UID
		}
		parent, err := ioctlFd(fd, nsGetParent)
		if err != nil {
			break // EPERM: outside this program's namespace, which cannot be
		}
		var pst unix.Stat_t
		if unix.Fstat(parent, &pst) == nil && pst.Ino == self.Ino && pst.Dev == self.Dev {
			unix.Close(parent)
			o, err := ownerUID(fd)
			unix.Close(fd)
			if err != nil {
				return Unknown, st.Ino, true
			}
			return o, st.Ino, true
		}
		unix.Close(fd)
		fd = parent
	}
	unix.Close(fd)
	return Unknown, 0, true
}

// selfNS is this program's user namespace (it never changes it).
var selfNS = sync.OnceValues(func() (unix.Stat_t, bool) {
	var st unix.Stat_t
	return st, unix.Stat("/proc/self/ns/user", &st) == nil
})

func ioctlFd(fd int, req uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

func ownerUID(fd int) (int, error) {
	var uid uint32
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), nsGetOwnerUID, uintptr(unsafe.Pointer(&uid)))
	if errno != 0 {
		return Unknown, errno
	}
	return int(uid), nil
}

// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package owner names who a process's costs are charged to (its share
// group): its real UID when it runs in the host's user namespace; else,
// in a user namespace below the host's, the UID that created the outermost
// one, or, when root created it (a container runtime: Kubernetes pods
// with hostUsers: false, rootful Podman's --userns=auto), that namespace
// itself. A user with a subordinate UID range (rootless containers) or
// root inside a user namespace can run processes under as many UIDs as it
// maps; they are all charged to the one host user who made the namespace,
// or to the one namespace root made for them, which neither the process
// nor the user can choose (the kernel records the creator's effective UID,
// and a namespace cannot be moved under another: nested ones count as
// their outermost).
package owner

import (
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
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

// Of is the owner charged for pid, whose real UID is uid (-1:
// unreadable): a host UID as seen from this program's user namespace (the
// host's in the DaemonSet), or a negative key naming a user namespace root
// made. procRoot is "/proc" (another root: a test's tree, whose PIDs are
// not this host's, and uid is returned).
func Of(procRoot string, pid, uid int) int {
	if procRoot != "/proc" {
		return uid
	}
	self, ok := selfNS()
	if !ok {
		return uid
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return uid
	}
	for range maxDepth {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			break
		}
		if st.Ino == self.Ino && st.Dev == self.Dev {
			unix.Close(fd)
			return uid // this program's namespace: the real UID is a host UID
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
			switch {
			case err != nil:
				return Unknown
			case o == 0:
				return namespaceKey(st.Ino) // a runtime's, one per container
			}
			return o
		}
		unix.Close(fd)
		fd = parent
	}
	unix.Close(fd)
	return Unknown
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

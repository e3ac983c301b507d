// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package remote reads another process's memory with process_vm_readv(2),
// bounded by the caller's buffer, never by what the target claims, in time
// by the read timeout (deadline.go), and made by a helper process
// (helper.go), so that a read that never returns holds no thread of this
// program, which a signal can then always end.
package remote

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sentinel errors, so callers can count failures by reason.
var (
	ErrProcessGone = errors.New("process gone")
	ErrBadAddress  = errors.New("address not mapped in target")
	// ErrPermission: needs CAP_SYS_PTRACE, or the same uid and a permissive
	// ptrace_scope (with Yama's ptrace_scope 1 the reader helper, a child,
	// may not read this program or its other children without the
	// capability).
	ErrPermission = errors.New("permission denied reading process memory")
	ErrShortRead  = errors.New("short read")
)

type Memory struct {
	PID int
}

// ReadAt reads len(p) bytes at addr, waiting at most the read timeout
// (ErrTimeout; ErrQuarantined at once while an earlier read hangs).
func (m Memory) ReadAt(p []byte, addr uint64) error {
	if len(p) == 0 {
		return nil
	}
	return reader.readAt(m.PID, p, addr)
}

// rawReadAtErrno is the system call, in the reader helper
// (helper_serve.go): the bytes read, or the error number.
func rawReadAtErrno(pid int, p []byte, addr uint64) (int, unix.Errno) {
	// Raw syscall: x/sys's ProcessVMReadv makes the iovecs escape (two allocations).
	local := unix.Iovec{Base: &p[0], Len: uint64(len(p))}
	remote := unix.RemoteIovec{Base: uintptr(addr), Len: len(p)}
	n, _, errno := unix.Syscall6(unix.SYS_PROCESS_VM_READV, uintptr(pid),
		uintptr(unsafe.Pointer(&local)), 1,
		uintptr(unsafe.Pointer(&remote)), 1, 0)
	return int(n), errno
}

func (m Memory) ReadUint64(addr uint64) (uint64, error) {
	return reader.readUint64(m.PID, addr)
}

func classify(errno unix.Errno, pid int, addr uint64, n int) error {
	var kind error
	switch errno {
	case unix.ESRCH:
		kind = ErrProcessGone
	case unix.EFAULT:
		kind = ErrBadAddress
	case unix.EPERM, unix.EACCES:
		kind = ErrPermission
	default:
		kind = errno
	}
	return fmt.Errorf("pid %d: process_vm_readv %d bytes at %#x: %w", pid, n, addr, kind)
}

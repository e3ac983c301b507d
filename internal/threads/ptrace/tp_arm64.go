// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ptrace

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// ntARMTLS is the regset holding TPIDR_EL0 (linux/elf.h NT_ARM_TLS).
const ntARMTLS = 0x401

// threadPointer reads TPIDR_EL0, the arm64 thread pointer, of a stopped tracee.
func threadPointer(tid int) (uint64, error) {
	var tp uint64
	iov := unix.Iovec{Base: (*byte)(unsafe.Pointer(&tp)), Len: 8}
	if err := ptracePtr(unix.PTRACE_GETREGSET, tid, ntARMTLS, unsafe.Pointer(&iov)); err != nil {
		return 0, err
	}
	return tp, nil
}

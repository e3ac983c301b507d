// SPDX-License-Identifier: Apache-2.0

//go:build linux

package ptrace

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// threadPointer reads fs_base, the x86-64 thread pointer, of a stopped tracee.
func threadPointer(tid int) (uint64, error) {
	var regs unix.PtraceRegs
	if err := ptracePtr(unix.PTRACE_GETREGS, tid, 0, unsafe.Pointer(&regs)); err != nil {
		return 0, err
	}
	return regs.Fs_base, nil
}
